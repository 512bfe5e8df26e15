// Checks that a service guards every method: the policy table covers the service's descriptor,
// and a caller is refused exactly the methods its roles do not allow. Called from each
// service's test with a channel made for one caller, so a handler that forgets its
// Authorizer::Check (or a new method without a policy) fails a test.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/grpc/auth.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/test_pki.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/channel.h"

namespace moe::common::rpc::testing {

// Every method of `service` has exactly one policy and every policy names a method of it.
void ExpectPolicyCoversService(const google::protobuf::ServiceDescriptor& service,
                               std::span<const MethodPolicy> policies);

// Calls every method of `service` over `channel` with an empty request (one message, then
// half-close; 5 s deadline). Methods whose policy does not allow any of `caller` must fail with
// `refused_code` (UNAUTHENTICATED for an anonymous caller, PERMISSION_DENIED for one holding
// other roles); the others must not fail with either auth code.
void ExpectOnlyAllowedMethodsServed(::grpc::Channel& channel,
                                    const google::protobuf::ServiceDescriptor& service,
                                    std::span<const MethodPolicy> policies, RoleSet caller,
                                    ::grpc::StatusCode refused_code);

}  // namespace moe::common::rpc::testing

namespace moe::common::rpc::testing {

// A cluster's PKI for one service's test: a CA, the server's certificate (localhost), one client
// certificate per role (URI SAN spiffe://moe.test/<role>) and an impostor holding the admin's
// SAN from another CA; ServerOptions with mTLS and auth naming those identities.
//
//   ClusterPki pki(dir);
//   ServerOptions grpc = pki.Server();
//   auto auth = Authorizer::Create(grpc.auth, "router", registry, clock);
//   ... start the service with *auth on grpc ...
//   pki.ExpectEveryMethodGuarded("127.0.0.1:" + port, service_descriptor, kRouterPolicies);
class ClusterPki {
 public:
  explicit ClusterPki(const std::string& dir);
  ServerOptions Server() const;
  // mTLS client options for a role's certificate (nullopt role: no certificate).
  ChannelOptions Client(std::optional<Role> role) const;
  ChannelOptions Impostor() const;

  // The policy table covers the service; plaintext, certificate-less and impostor callers are
  // refused at the handshake; each role is served exactly the methods that allow it.
  void ExpectEveryMethodGuarded(const std::string& target,
                                const google::protobuf::ServiceDescriptor& service,
                                std::span<const MethodPolicy> policies) const;

 private:
  CertFiles ca_, server_, impostor_;
  std::vector<CertFiles> roles_;  // by Role
};

}  // namespace moe::common::rpc::testing
