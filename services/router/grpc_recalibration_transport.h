// The gRPC RecalibrationTransport (core/recalibration.h): GetStats and SetPlacement on routers,
// LoadExperts and UnloadExperts on expert workers. One implementation for every coordinator of
// the recalibration protocol (DESIGN.md §2): `moe admin calibrate-router | stats | coordinate`
// and the operator (services/operator).
//
//   GrpcRecalibrationTransport transport({"10.0.0.5:50051", "10.0.0.6:50051"},
//                                        {.timeout = absl::Seconds(60)});
//   RETURN_IF_ERROR(transport.Connect());
//   ASSIGN_OR_RETURN(auto report, router::Recalibrate(transport, {.window = absl::Minutes(5)}));
//
// Every RPC has the deadline `timeout` (SetPlacement's covers the router's drain wait). Errors
// are the RPC's status, the message prefixed with the peer address and the RPC name. Worker
// channels are made per call (workers come and go with scaling; a channel is cheap).
//
// Thread-compatible: one coordinator drives a transport at a time.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc/channel_factory.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "services/router/core/recalibration.h"

namespace moe::router {

struct GrpcRecalibrationTransportOptions {
  // Deadline of each RPC. SetPlacement returns once the old version drained on that router, so
  // keep this above the routers' experts.drain_timeout.
  absl::Duration timeout = absl::Seconds(60);
  // Channels to routers and workers (TLS, message size, reconnect backoff).
  common::rpc::ChannelOptions channel;
};

class GrpcRecalibrationTransport final : public RecalibrationTransport {
 public:
  // `routers`: "host:port" of every router, in the order num_routers() indexes them.
  GrpcRecalibrationTransport(std::vector<std::string> routers,
                             GrpcRecalibrationTransportOptions options = {});
  ~GrpcRecalibrationTransport() override;
  GrpcRecalibrationTransport(const GrpcRecalibrationTransport&) = delete;
  GrpcRecalibrationTransport& operator=(const GrpcRecalibrationTransport&) = delete;

  // Makes the router channels (lazily connected: an unreachable router fails its first RPC).
  // The channel factory's errors (bad TLS files). REQUIRES: called once, before any RPC.
  absl::Status Connect();

  // The raw GetStats answer of router `router` over `window` (for `moe admin stats`).
  absl::StatusOr<moe::router::v1::GetStatsResponse> RawStats(int router, absl::Duration window);
  // The core view of a GetStats answer. REQUIRES: resp.has_placement(). INVALID_ARGUMENT for a
  // placement the proto conversion refuses.
  static absl::StatusOr<RouterLoadReport> ToReport(const moe::router::v1::GetStatsResponse& resp);

  const std::vector<std::string>& routers() const { return routers_; }

  // RecalibrationTransport
  int num_routers() const override { return static_cast<int>(routers_.size()); }
  // FAILED_PRECONDITION when the router runs its experts in-process (nothing to place).
  absl::StatusOr<RouterLoadReport> GetStats(int router, absl::Duration window) override;
  absl::Status SetPlacement(int router, const PlacementTable& table) override;
  absl::Status LoadExperts(const std::string& worker_address,
                           const std::vector<model::ExpertKey>& keys) override;
  absl::Status UnloadExperts(const std::string& worker_address,
                             const std::vector<model::ExpertKey>& keys) override;

 private:
  const std::vector<std::string> routers_;
  const GrpcRecalibrationTransportOptions options_;
  std::vector<std::unique_ptr<moe::router::v1::Router::Stub>> stubs_;
};

}  // namespace moe::router
