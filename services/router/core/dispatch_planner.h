// Replica choice for one layer's expert batches (pure logic, no transport): routing semantics are
// the engine's (which experts run); this only picks which replica runs each expert's batch, and
// groups the batches by worker so that each worker gets one call.
//
// Rule: among the live replicas of the expert (healthy, not excluded), prefer those at or below
// the utilisation threshold; among those, the one with the fewest outstanding tokens (in flight
// plus already planned in this call); ties rotate with `rotation` so idle replicas share work.
// When every live replica is above the threshold, the least-loaded of them is used anyway.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "services/router/core/placement_table.h"

namespace moe::router {

struct ReplicaState {
  bool healthy = true;
  double utilisation = 0;       // busy fraction over the recent window, [0, 1]
  int64_t inflight_tokens = 0;  // tokens of calls sent and not yet answered
};

struct DispatchBatch {
  int32_t expert_id = 0;
  int64_t num_tokens = 0;
};

struct DispatchPlan {
  // worker id -> indices into the batches, in increasing order.
  std::map<int32_t, std::vector<size_t>> by_worker;
  // Indices of batches whose expert has no live replica.
  std::vector<size_t> unavailable;
};

DispatchPlan PlanDispatch(const PlacementTable& placement, int32_t layer_idx,
                          absl::Span<const DispatchBatch> batches,
                          const std::function<ReplicaState(int32_t worker_id)>& state,
                          double utilisation_threshold,
                          const absl::flat_hash_set<int32_t>& excluded, uint64_t rotation);

}  // namespace moe::router
