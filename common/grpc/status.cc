#include "common/grpc/status.h"

#include <string>

namespace moe::common::rpc {

::grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return ::grpc::Status::OK;
  // Both enums are the canonical codes 1..16 (abseil status.h says so; gRPC's are the origin).
  return ::grpc::Status(static_cast<::grpc::StatusCode>(status.code()),
                        std::string(status.message()));
}

absl::Status FromGrpcStatus(const ::grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  const int code = static_cast<int>(status.error_code());
  if (code < 1 || code > 16) return absl::UnknownError(status.error_message());
  return absl::Status(static_cast<absl::StatusCode>(code), status.error_message());
}

}  // namespace moe::common::rpc
