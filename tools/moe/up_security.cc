#include "tools/moe/up_security.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file.h"
#include "common/base/secret.h"
#include "common/grpc/pki.h"

namespace moe::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::array<const char*, 3> kRoles = {"gateway", "router", "admin"};

// `n` random bytes as hex, from the kernel's CSPRNG.
absl::StatusOr<std::string> RandomHex(size_t n) {
  std::string bytes(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::getrandom(bytes.data() + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return absl::InternalError("getrandom failed");
    got += static_cast<size_t>(r);
  }
  return absl::BytesToHexString(bytes);
}

// Writes `text` to a new file readable by the owner only.
absl::Status WriteSecret(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write \"", path, "\""));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      ::close(fd);
      return absl::InternalError(absl::StrCat("cannot write \"", path, "\""));
    }
    done += static_cast<size_t>(w);
  }
  return ::close(fd) == 0 ? absl::OkStatus()
                          : absl::InternalError(absl::StrCat("cannot write \"", path, "\""));
}

void Set(std::vector<std::string>& flags, const std::string& key, const std::string& value) {
  flags.push_back("--set");
  flags.push_back(key + "=" + value);
}

}  // namespace

std::string SpiffeId(const std::string& kind) { return "spiffe://moe.local/" + kind; }

const std::vector<std::string>& CertifiedKinds() {
  static const std::vector<std::string>* kinds = new std::vector<std::string>{
      "expert_worker", "kv_store", "router", "asr", "tts", "gateway", "admin"};
  return *kinds;
}

std::vector<std::string> ClusterSecurity::ServerFlags(const std::string& kind) const {
  std::vector<std::string> flags;
  if (options.mtls) {
    Set(flags, "grpc.tls.cert_file", CertFile(kind));
    Set(flags, "grpc.tls.key_file", KeyFile(kind));
    Set(flags, "grpc.tls.client_ca_file", ca_file);
    Set(flags, "grpc.tls.require_client_cert", "true");
  }
  if (options.auth) {
    Set(flags, "grpc.auth.enabled", "true");
    for (const char* role : kRoles) {
      if (options.mtls) Set(flags, absl::StrCat("grpc.auth.", role, ".identities"), SpiffeId(role));
      if (options.UseTokens()) {
        Set(flags, absl::StrCat("grpc.auth.", role, ".token_files"), TokenFile(role));
      }
    }
  }
  return flags;
}

std::vector<std::string> ClusterSecurity::ChannelFlags(const std::string& section,
                                                       const std::string& kind,
                                                       const std::string& role) const {
  std::vector<std::string> flags;
  if (options.mtls) {
    Set(flags, section + ".tls.enabled", "true");
    Set(flags, section + ".tls.ca_file", ca_file);
    Set(flags, section + ".tls.cert_file", CertFile(kind));
    Set(flags, section + ".tls.key_file", KeyFile(kind));
    Set(flags, section + ".tls.server_name_override", "localhost");
  }
  if (options.UseTokens()) Set(flags, section + ".token_file", TokenFile(role));
  return flags;
}

common::rpc::ChannelOptions ClusterSecurity::AdminChannel() const {
  common::rpc::ChannelOptions o;
  if (options.mtls) {
    o.tls.enabled = true;
    o.tls.ca_file = ca_file;
    o.tls.cert_file = CertFile("admin");
    o.tls.key_file = KeyFile("admin");
    o.tls.server_name_override = "localhost";
  }
  if (options.UseTokens()) o.token_file = TokenFile("admin");
  return o;
}

absl::StatusOr<ClusterSecurity> MakeClusterSecurity(const SecurityOptions& options,
                                                    const std::string& dir,
                                                    const std::string& host) {
  ClusterSecurity sec;
  sec.options = options;
  sec.host = host;
  sec.dir = fs::absolute(dir).lexically_normal().string();
  if (!sec.enabled()) return sec;
  std::error_code ec;
  fs::remove_all(sec.dir, ec);
  fs::create_directories(sec.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create \"", sec.dir, "\""));
  fs::permissions(sec.dir, fs::perms::owner_all, ec);

  if (options.mtls) {
    common::rpc::Pki pki(sec.dir);
    absl::StatusOr<common::rpc::CertFiles> ca = pki.Ca("moe-up");
    if (!ca.ok()) return ca.status();
    sec.ca_file = ca->cert_file;
    // Servers are dialed as "localhost" (server_name_override); the bind address is named too.
    std::vector<std::string> names = {"DNS:localhost"};
    if (host.find_first_not_of("0123456789.:") == std::string::npos) {
      names.push_back("IP:" + host);
    } else if (host != "localhost") {
      names.push_back("DNS:" + host);
    }
    for (const std::string& kind : CertifiedKinds()) {
      std::vector<std::string> sans = names;
      sans.push_back("URI:" + SpiffeId(kind));
      absl::StatusOr<common::rpc::CertFiles> cert = pki.Issue(*ca, kind, sans);
      if (!cert.ok()) return cert.status();
    }
    // Nothing signs after this: the CA key goes.
    fs::remove(ca->key_file, ec);
  }
  if (options.UseTokens()) {
    for (const char* role : kRoles) {
      absl::StatusOr<std::string> token = RandomHex(32);
      if (!token.ok()) return token.status();
      if (absl::Status s = WriteSecret(sec.TokenFile(role), *token + "\n"); !s.ok()) return s;
    }
  }
  if (options.auth) {
    if (!options.api_keys_file.empty()) {
      sec.api_keys_file = fs::absolute(options.api_keys_file).lexically_normal().string();
      if (!common::ReadFile(sec.api_keys_file).ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("security.api_keys_file: cannot read \"", sec.api_keys_file, "\""));
      }
    } else {
      absl::StatusOr<std::string> hex = RandomHex(24);
      if (!hex.ok()) return hex.status();
      const std::string key = "sk-moe-" + *hex;
      sec.api_key_file = sec.dir + "/api-key";
      sec.api_keys_file = sec.dir + "/api-keys";
      if (absl::Status s = WriteSecret(sec.api_key_file, key + "\n"); !s.ok()) return s;
      const std::string line =
          absl::StrCat("# made by moe up; the key itself is in api-key\n",
                       common::FormatDigest(common::DigestOf(key)), " name=moe-up priority=true\n");
      if (absl::Status s = WriteSecret(sec.api_keys_file, line); !s.ok()) return s;
    }
  }
  return sec;
}

}  // namespace moe::cli
