// Who may call which RPC: one mechanism for every gRPC service of the cluster.
//
// A caller holds roles. Under mTLS the roles come from its client certificate: each identity
// (a SAN of the certificate: DNS name, URI or SPIFFE id) listed under a role holds that role.
// Without mTLS (or in addition) a caller may present a bearer token (`authorization: Bearer
// <token>` metadata, which CreateChannel adds from ChannelOptions.token_file); each token file
// listed under a role grants it. Token files are read at start and re-read when they change;
// only their SHA-256 is kept, and presented tokens are compared in constant time.
//
// Every service declares, once, the roles allowed on each of its methods (a MethodPolicy per
// method, in one table), and each handler starts with
//
//   if (::grpc::Status s = auth_.Check(*context, kSetPlacement); !s.ok()) return s;
//
// testing/method_policy.h checks, from the service's descriptor, that every method has a policy
// and that a caller without the role is refused, so a handler that forgets the check fails a
// test. With `enabled: false` (the default: a local cluster on loopback) every call is served.
//
// Refusals are UNAUTHENTICATED (no identity: no certificate and no valid token) or
// PERMISSION_DENIED (an identity without the role), counted in
// moe_rpc_refused_total{service, method, code}. Neither the token nor its hash is ever logged.
//
// Thread-safety: Check may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/grpc/options.h"
#include "common/metrics/registry.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/status.h"

namespace moe::common::rpc {

class RoleSet {
 public:
  constexpr RoleSet() = default;
  constexpr RoleSet(std::initializer_list<Role> roles) {
    for (Role r : roles) bits_ |= Bit(r);
  }
  constexpr bool contains(Role r) const { return (bits_ & Bit(r)) != 0; }
  constexpr bool intersects(RoleSet o) const { return (bits_ & o.bits_) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr void insert(Role r) { bits_ |= Bit(r); }
  std::string ToString() const;  // "gateway,admin"

 private:
  static constexpr uint8_t Bit(Role r) { return static_cast<uint8_t>(1u << static_cast<int>(r)); }
  uint8_t bits_ = 0;
};

// One method of a service and the roles allowed to call it.
struct MethodPolicy {
  std::string_view method;  // "SetPlacement" (the name in the .proto)
  RoleSet allowed;
};

class Authorizer {
 public:
  // `service` names the service in metrics ("router"). Errors: kInvalidArgument for bad
  // options, kNotFound for a token file that cannot be read.
  static absl::StatusOr<std::unique_ptr<Authorizer>> Create(const AuthOptions& options,
                                                            std::string service,
                                                            metrics::Registry& registry,
                                                            Clock& clock);
  // Serves every call (tests of a core behind a server, and `enabled: false`).
  static std::unique_ptr<Authorizer> AllowAll(std::string service, metrics::Registry& registry);
  ~Authorizer();
  Authorizer(const Authorizer&) = delete;
  Authorizer& operator=(const Authorizer&) = delete;

  // OK if the caller holds one of `policy.allowed`; else UNAUTHENTICATED or PERMISSION_DENIED
  // (counted).
  ::grpc::Status Check(const ::grpc::ServerContextBase& context, const MethodPolicy& policy) const;

  // The roles the caller of `context` holds (what Check decides on).
  RoleSet RolesOf(const ::grpc::ServerContextBase& context) const;

  bool enabled() const;

 private:
  struct Rep;
  explicit Authorizer(std::unique_ptr<Rep> rep);
  std::unique_ptr<Rep> rep_;
};

// The metadata key and value a client sends with its token.
inline constexpr std::string_view kAuthorizationMetadata = "authorization";
std::string BearerValue(std::string_view token);

}  // namespace moe::common::rpc
