// Checks that a service guards every method: the policy table covers the service's descriptor,
// and a caller is refused exactly the methods its roles do not allow. Called from each
// service's test with a channel made for one caller, so a handler that forgets its
// Authorizer::Check (or a new method without a policy) fails a test.
#pragma once

#include <span>

#include "common/grpc/auth.h"
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
