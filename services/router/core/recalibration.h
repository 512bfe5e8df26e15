// Recalibration, coordinated in one place (DESIGN.md §2): gather every router's load window,
// compute a new placement (placement_algorithm.h), then
//   1. load the new replicas on the workers,
//   2. switch every router to the new version (SetPlacement; a router answers once calls it
//      dispatched under older versions have drained),
//   3. unload what is no longer placed.
// At every moment each expert has a live replica in the version a router uses: the new replicas
// are resident before any router uses them, and nothing is unloaded before every router left
// the old version. The transport is an interface so the protocol is unit-tested without gRPC;
// `moe admin calibrate-router` supplies the gRPC one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/router/core/placement_table.h"

namespace moe::router {

// What one router reports (GetStats).
struct RouterLoadReport {
  std::string router_id;
  PlacementTable placement;             // its active placement
  std::vector<uint64_t> expert_tokens;  // [num_layers * num_experts] over the window
};

class RecalibrationTransport {
 public:
  virtual ~RecalibrationTransport() = default;
  virtual int num_routers() const = 0;
  virtual absl::StatusOr<RouterLoadReport> GetStats(int router, absl::Duration window) = 0;
  // Returns once the router uses `table` and its calls under older versions drained.
  virtual absl::Status SetPlacement(int router, const PlacementTable& table) = 0;
  virtual absl::Status LoadExperts(const std::string& worker_address,
                                   const std::vector<model::ExpertKey>& keys) = 0;
  virtual absl::Status UnloadExperts(const std::string& worker_address,
                                     const std::vector<model::ExpertKey>& keys) = 0;
};

struct RecalibrationOptions {
  absl::Duration window = absl::Minutes(5);
  // Expert slots per worker and layer; 0 = the current most per worker + 1 (one redundant).
  int slots_per_worker = 0;
  // Compute and report only.
  bool dry_run = false;
};

struct RecalibrationReport {
  uint64_t previous_version = 0;
  uint64_t version = 0;
  int slots_per_worker = 0;
  uint64_t window_tokens = 0;               // all routers, all layers
  std::vector<double> balancedness_before;  // expected, per layer, under the old placement
  std::vector<double> balancedness_after;   // expected, under the new one
  int64_t experts_loaded = 0;               // (worker, layer, expert) replicas added
  int64_t experts_unloaded = 0;
  PlacementTable placement;  // the new table
};

// Runs the protocol above. Errors: FAILED_PRECONDITION when routers disagree on the placement
// (different versions or tables) or there is nothing to place; the transport's errors (a step
// that fails stops the protocol: after step 1 the extra replicas stay loaded and unused, after a
// partial step 2 rerunning the command converges).
absl::StatusOr<RecalibrationReport> Recalibrate(RecalibrationTransport& transport,
                                                const RecalibrationOptions& options);

// Replicas in `to` and not in `from`, per worker address (sorted keys).
std::map<std::string, std::vector<model::ExpertKey>> PlacementDiff(const PlacementTable& from,
                                                                   const PlacementTable& to);

}  // namespace moe::router
