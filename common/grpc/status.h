// Namespace moe::common::rpc (not ...::grpc, which would shadow ::grpc inside moe::common).
// The one absl::Status <-> grpc::Status mapping (STYLE.md rule 16). The canonical codes are the
// same set on both sides, so codes map one to one and messages pass through unchanged.
#pragma once

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace moe::common::rpc {

// OK maps to OK; any other code keeps its number and message.
::grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const ::grpc::Status& status);

}  // namespace moe::common::rpc
