#include "services/router/core/dispatch_planner.h"

#include <tuple>

#include "absl/container/flat_hash_map.h"

namespace moe::router {

DispatchPlan PlanDispatch(const PlacementTable& placement, int32_t layer_idx,
                          absl::Span<const DispatchBatch> batches,
                          const std::function<ReplicaState(int32_t worker_id)>& state,
                          double utilisation_threshold,
                          const absl::flat_hash_set<int32_t>& excluded, uint64_t rotation) {
  DispatchPlan plan;
  absl::flat_hash_map<int32_t, ReplicaState> states;
  absl::flat_hash_map<int32_t, int64_t> planned;
  auto state_of = [&](int32_t w) -> const ReplicaState& {
    auto it = states.find(w);
    if (it == states.end()) it = states.emplace(w, state(w)).first;
    return it->second;
  };
  for (size_t i = 0; i < batches.size(); ++i) {
    const std::vector<int32_t>& replicas = placement.Replicas(layer_idx, batches[i].expert_id);
    const size_t n = replicas.size();
    int32_t best = -1;
    std::tuple<bool, int64_t, size_t> best_key;
    for (size_t j = 0; j < n; ++j) {
      // Visit the replicas starting at a rotating offset: the first minimum found wins.
      const int32_t w = replicas[(j + rotation + i) % n];
      if (excluded.contains(w)) continue;
      const ReplicaState& s = state_of(w);
      if (!s.healthy) continue;
      const std::tuple<bool, int64_t, size_t> key{s.utilisation > utilisation_threshold,
                                                  s.inflight_tokens + planned[w], j};
      if (best < 0 || key < best_key) {
        best = w;
        best_key = key;
      }
    }
    if (best < 0) {
      plan.unavailable.push_back(i);
      continue;
    }
    planned[best] += batches[i].num_tokens;
    plan.by_worker[best].push_back(i);
  }
  return plan;
}

}  // namespace moe::router
