// GenerateBackend over the routers' gRPC `Generate` (proto moe/router/v1/router.proto), with
// the router chosen per request by prefix affinity balanced against load (core/router_picker.h).
// Loads come from polling each router's GetStats every routing.stats_interval (a router whose
// GetStats fails is marked unhealthy) plus this gateway's own in-flight count per router.
// A call that fails before its first message with UNAVAILABLE or RESOURCE_EXHAUSTED is retried
// on the next router in order (up to routing.max_attempts); after a token was received a
// failure ends the stream.
//
// Uses gRPC's callback API: no thread per stream. Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/kv/block_hash.h"
#include "services/gateway/core/gateway_options.h"
#include "services/gateway/core/generate_backend.h"
#include "services/gateway/core/router_picker.h"

namespace moe::gateway {

class GrpcBackend : public GenerateBackend {
 public:
  // `model_id` names the KV hash namespace (must be the routers' model id for affinity to match
  // their caches). kInvalidArgument for bad options. Starts the stats poller.
  static absl::StatusOr<std::unique_ptr<GrpcBackend>> Create(const RoutingOptions& options,
                                                             const std::string& model_id);
  ~GrpcBackend() override = default;

  // The current view of each router, in options.routers order (tests, `moe admin`).
  virtual std::vector<RouterLoad> Loads() const = 0;
  // Polls every router once now (tests; the poller does it periodically).
  virtual void PollNowForTesting() = 0;
  // The KV namespace prompts are hashed under for affinity: the routers' own (GetStats
  // kv_namespace: model id, checkpoint fingerprint, block size, dtype, numerics) once one
  // answered, before that the options' model id, block size and dtype.
  virtual kv::BlockHashRootKey AffinityNamespace() const = 0;
};

}  // namespace moe::gateway
