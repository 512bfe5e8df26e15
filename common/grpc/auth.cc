#include "common/grpc/auth.h"

#include <sys/stat.h>

#include <array>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "common/base/file.h"
#include "common/base/log.h"
#include "common/base/secret.h"
#include "grpc/grpc_security_constants.h"

namespace moe::common::rpc {
namespace {

constexpr std::array<Role, kNumRoles> kRoles = {Role::kGateway, Role::kRouter, Role::kAdmin};

// The certificate properties that name the peer: every SAN form gRPC reports.
constexpr std::array<const char*, 4> kIdentityProperties = {
    GRPC_PEER_SPIFFE_ID_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME,
    GRPC_X509_SAN_PROPERTY_NAME};

struct FileStamp {
  int64_t mtime_ns = -1;
  int64_t size = -1;
  int64_t inode = -1;
  bool operator==(const FileStamp&) const = default;
};

FileStamp StampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_ino)};
}

// One token file's digest. The token itself is dropped as soon as it is hashed.
absl::StatusOr<SecretDigest> ReadTokenDigest(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok())
    return absl::NotFoundError(absl::StrCat("token file \"", path, "\": cannot read"));
  absl::string_view token = absl::StripAsciiWhitespace(*text);
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file \"", path, "\" is empty"));
  return DigestOf(std::string_view(token.data(), token.size()));
}

}  // namespace

std::string RoleSet::ToString() const {
  std::vector<std::string> names;
  for (Role r : kRoles) {
    if (contains(r)) names.emplace_back(RoleName(r));
  }
  return names.empty() ? "none" : absl::StrJoin(names, ",");
}

std::string BearerValue(std::string_view token) { return "Bearer " + std::string(token); }

struct Authorizer::Rep {
  struct Token {
    std::string path;
    RoleSet roles;
    FileStamp stamp;
    SecretDigest digest;
    bool valid = false;
  };

  Rep(std::string service, metrics::Registry& registry, Clock& clock)
      : service(std::move(service)),
        clock(clock),
        refused(registry.CounterFamily(
            "moe_rpc_refused_total", "gRPC calls refused by authorisation, per method and code.")) {
  }

  // Re-reads token files whose stamp changed, at most once per reload interval. A file that
  // became unreadable or empty keeps no token (a revoked token stops working).
  void MaybeReload() const ABSL_LOCKS_EXCLUDED(mu) {
    if (tokens_empty) return;
    const absl::Time now = clock.Now();
    absl::MutexLock lock(&mu);
    if (now < next_reload) return;
    next_reload = now + options.token_reload_interval;
    for (Token& t : tokens) {
      const FileStamp stamp = StampOf(t.path);
      if (stamp == t.stamp) continue;
      t.stamp = stamp;
      absl::StatusOr<SecretDigest> d = ReadTokenDigest(t.path);
      t.valid = d.ok();
      if (d.ok()) t.digest = *d;
      MOE_LOG_INFO("auth: token file \"{}\" reloaded{}", t.path,
                   t.valid ? "" : " (unreadable or empty: its token is refused)");
    }
  }

  RoleSet TokenRoles(absl::string_view bearer) const {
    RoleSet roles;
    if (!absl::ConsumePrefix(&bearer, "Bearer ")) return roles;
    const absl::string_view token = absl::StripAsciiWhitespace(bearer);
    const SecretDigest presented = DigestOf(std::string_view(token.data(), token.size()));
    absl::MutexLock lock(&mu);
    // Every token is compared (no early exit), each in constant time.
    for (const Token& t : tokens) {
      const bool match = DigestEquals(t.digest, presented);
      if (match && t.valid) {
        for (Role r : kRoles) {
          if (t.roles.contains(r)) roles.insert(r);
        }
      }
    }
    return roles;
  }

  const std::string service;
  Clock& clock;
  metrics::Family<metrics::Counter>& refused;
  AuthOptions options;
  bool tokens_empty = true;
  mutable absl::Mutex mu;
  mutable std::vector<Token> tokens ABSL_GUARDED_BY(mu);
  mutable absl::Time next_reload ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

Authorizer::Authorizer(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
Authorizer::~Authorizer() = default;

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::Create(const AuthOptions& options,
                                                               std::string service,
                                                               metrics::Registry& registry,
                                                               Clock& clock) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto rep = std::make_unique<Rep>(std::move(service), registry, clock);
  rep->options = options;
  {
    absl::MutexLock lock(&rep->mu);
    for (Role r : kRoles) {
      for (const std::string& path : options.members(r).token_files) {
        // The same file under two roles grants both.
        auto it = std::find_if(rep->tokens.begin(), rep->tokens.end(),
                               [&](const Rep::Token& t) { return t.path == path; });
        if (it != rep->tokens.end()) {
          it->roles.insert(r);
          continue;
        }
        Rep::Token t{.path = path, .roles = {r}, .stamp = StampOf(path)};
        absl::StatusOr<SecretDigest> d = ReadTokenDigest(path);
        if (!d.ok()) return d.status();
        t.digest = *d;
        t.valid = true;
        rep->tokens.push_back(std::move(t));
      }
    }
    rep->tokens_empty = rep->tokens.empty();
    rep->next_reload = clock.Now() + options.token_reload_interval;
  }
  return std::unique_ptr<Authorizer>(new Authorizer(std::move(rep)));
}

std::unique_ptr<Authorizer> Authorizer::AllowAll(std::string service, metrics::Registry& registry) {
  return std::unique_ptr<Authorizer>(
      new Authorizer(std::make_unique<Rep>(std::move(service), registry, SystemClock::Get())));
}

bool Authorizer::enabled() const { return rep_->options.enabled; }

RoleSet Authorizer::RolesOf(const ::grpc::ServerContextBase& context) const {
  RoleSet roles;
  // Certificate identities (only present when the TLS handshake verified the chain).
  std::shared_ptr<const ::grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const char* property : kIdentityProperties) {
      for (const ::grpc::string_ref& value : auth->FindPropertyValues(property)) {
        const std::string_view id(value.data(), value.size());
        for (Role r : kRoles) {
          for (const std::string& member : rep_->options.members(r).identities) {
            if (member == id) roles.insert(r);
          }
        }
      }
    }
  }
  if (!rep_->tokens_empty) {
    const auto& md = context.client_metadata();
    auto [begin, end] = md.equal_range(
        ::grpc::string_ref(kAuthorizationMetadata.data(), kAuthorizationMetadata.size()));
    if (begin != end) {
      rep_->MaybeReload();
      const absl::string_view bearer(begin->second.data(), begin->second.size());
      RoleSet from_token = rep_->TokenRoles(bearer);
      for (Role r : kRoles) {
        if (from_token.contains(r)) roles.insert(r);
      }
    }
  }
  return roles;
}

::grpc::Status Authorizer::Check(const ::grpc::ServerContextBase& context,
                                 const MethodPolicy& policy) const {
  if (!rep_->options.enabled) return ::grpc::Status::OK;
  const RoleSet roles = RolesOf(context);
  if (roles.intersects(policy.allowed)) return ::grpc::Status::OK;
  const bool anonymous = roles.empty();
  const char* code = anonymous ? "UNAUTHENTICATED" : "PERMISSION_DENIED";
  rep_->refused
      .Add({{"service", rep_->service}, {"method", std::string(policy.method)}, {"code", code}})
      .Increment();
  if (anonymous) {
    return ::grpc::Status(::grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat(std::string(policy.method),
                                       ": no client certificate or token that names "
                                       "a role of this cluster"));
  }
  return ::grpc::Status(
      ::grpc::StatusCode::PERMISSION_DENIED,
      absl::StrCat(std::string(policy.method), ": needs role ", policy.allowed.ToString(),
                   "; the caller holds ", roles.ToString()));
}

}  // namespace moe::common::rpc
