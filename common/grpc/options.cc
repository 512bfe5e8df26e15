#include "common/grpc/options.h"

#include <array>
#include <string>

#include "absl/strings/str_cat.h"

namespace moe::common::rpc {
namespace {

constexpr std::array<Role, kNumRoles> kAllRoles = {Role::kGateway, Role::kRouter, Role::kAdmin};

absl::Status CheckKeyPair(const std::string& cert_file, const std::string& key_file) {
  if (!cert_file.empty() && key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key_file: \"\" is required with cert_file \"", cert_file, "\""));
  }
  if (cert_file.empty() && !key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cert_file: \"\" is required with key_file \"", key_file, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

void ServerTlsOptions::Describe(config::Schema<ServerTlsOptions>& s) {
  s.Add("cert_file", &ServerTlsOptions::cert_file, "PEM server certificate; empty = plaintext");
  s.Add("key_file", &ServerTlsOptions::key_file, "PEM private key of cert_file");
  s.Add("client_ca_file", &ServerTlsOptions::client_ca_file, "PEM CA of client certificates");
  s.Add("require_client_cert", &ServerTlsOptions::require_client_cert, "mTLS");
  s.Add("reload_interval", &ServerTlsOptions::reload_interval, "how often the files are re-read")
      .Range(absl::Seconds(1), absl::Hours(24));
}

absl::Status ServerTlsOptions::Validate() const {
  if (absl::Status s = CheckKeyPair(cert_file, key_file); !s.ok()) return s;
  if (!enabled() && !client_ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("client_ca_file: \"", client_ca_file,
                                                   "\" needs TLS (set cert_file and key_file)"));
  }
  if (require_client_cert && client_ca_file.empty()) {
    return absl::InvalidArgumentError("require_client_cert: true needs client_ca_file");
  }
  return absl::OkStatus();
}

void ClientTlsOptions::Describe(config::Schema<ClientTlsOptions>& s) {
  s.Add("enabled", &ClientTlsOptions::enabled, "use TLS");
  s.Add("ca_file", &ClientTlsOptions::ca_file, "PEM roots of the server; empty = system");
  s.Add("cert_file", &ClientTlsOptions::cert_file, "PEM client certificate (mTLS)");
  s.Add("key_file", &ClientTlsOptions::key_file, "PEM private key of cert_file");
  s.Add("server_name_override", &ClientTlsOptions::server_name_override,
        "name to verify in the server certificate");
  s.Add("reload_interval", &ClientTlsOptions::reload_interval, "how often the files are re-read")
      .Range(absl::Seconds(1), absl::Hours(24));
}

absl::Status ClientTlsOptions::Validate() const {
  if (absl::Status s = CheckKeyPair(cert_file, key_file); !s.ok()) return s;
  if (!enabled && (!ca_file.empty() || !cert_file.empty() || !server_name_override.empty())) {
    return absl::InvalidArgumentError("enabled: false, but TLS files or names are set");
  }
  return absl::OkStatus();
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kGateway:
      return "gateway";
    case Role::kRouter:
      return "router";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

void RoleMembers::Describe(config::Schema<RoleMembers>& s) {
  s.Add("identities", &RoleMembers::identities,
        "client-certificate SANs (DNS, URI, SPIFFE id) holding the role (mTLS)");
  s.Add("token_files", &RoleMembers::token_files, "files each holding a bearer token granting it");
}

const RoleMembers& AuthOptions::members(Role r) const {
  switch (r) {
    case Role::kGateway:
      return gateway;
    case Role::kRouter:
      return router;
    case Role::kAdmin:
      return admin;
  }
  return admin;
}

void AuthOptions::Describe(config::Schema<AuthOptions>& s) {
  s.Add("enabled", &AuthOptions::enabled, "serve only callers holding each method's role");
  s.Section("gateway", &AuthOptions::gateway);
  s.Section("router", &AuthOptions::router);
  s.Section("admin", &AuthOptions::admin);
  s.Add("token_reload_interval", &AuthOptions::token_reload_interval,
        "how often token files are checked for a change")
      .Range(absl::Milliseconds(10), absl::Hours(1));
}

absl::Status AuthOptions::Validate() const {
  if (absl::Status s = config::CheckFields(*this); !s.ok()) return s;
  if (!enabled) return absl::OkStatus();
  bool any = false;
  for (Role r : kAllRoles) {
    const RoleMembers& m = members(r);
    for (const std::string& id : m.identities) {
      if (id.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(RoleName(r)), ".identities: empty entry"));
      }
    }
    for (const std::string& f : m.token_files) {
      if (f.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(std::string(RoleName(r)), ".token_files: empty entry"));
      }
    }
    any = any || !m.identities.empty() || !m.token_files.empty();
  }
  if (!any) {
    return absl::InvalidArgumentError(
        "enabled: true, but no role has identities or token_files (nobody could call)");
  }
  return absl::OkStatus();
}

}  // namespace moe::common::rpc
