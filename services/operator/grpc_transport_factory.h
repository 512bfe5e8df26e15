// The recalibration transport over gRPC (services/router/grpc_recalibration_transport.h, the
// one `moe admin` uses) for the controller.
#pragma once

#include "services/operator/controller.h"
#include "services/router/grpc_recalibration_transport.h"

namespace moe::op {

class GrpcTransportFactory final : public TransportFactory {
 public:
  explicit GrpcTransportFactory(common::rpc::ChannelOptions channel = {}) : channel_(channel) {}
  absl::StatusOr<std::unique_ptr<router::RecalibrationTransport>> Make(
      const std::vector<std::string>& routers, absl::Duration rpc_timeout) override {
    auto t = std::make_unique<router::GrpcRecalibrationTransport>(
        routers,
        router::GrpcRecalibrationTransportOptions{.timeout = rpc_timeout, .channel = channel_});
    if (absl::Status s = t->Connect(); !s.ok()) return s;
    return std::unique_ptr<router::RecalibrationTransport>(std::move(t));
  }

 private:
  const common::rpc::ChannelOptions channel_;
};

}  // namespace moe::op
