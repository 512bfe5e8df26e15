#include "services/operator/core/pool_plan.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace moe::op {

const char* PoolPhaseName(PoolPhase phase) {
  switch (phase) {
    case PoolPhase::kSteady:
      return "Steady";
    case PoolPhase::kScalingUp:
      return "ScalingUp";
    case PoolPhase::kPlacing:
      return "Placing";
    case PoolPhase::kScalingDown:
      return "ScalingDown";
    case PoolPhase::kWaiting:
      return "Waiting";
  }
  return "Unknown";
}

bool ClusterPlan::steady() const {
  if (placement_target.has_value()) return false;
  for (const auto& [name, p] : pools) {
    if (p.phase != PoolPhase::kSteady) return false;
  }
  return true;
}

ClusterPlan PlanPools(const std::vector<PoolObservation>& pools,
                      const PlacementObservation& placement) {
  ClusterPlan plan;
  std::set<std::pair<int32_t, std::string>> placed;  // (id, address)
  for (const auto& w : placement.workers) placed.insert({w.worker_id, w.address});
  auto is_placed = [&](const WorkerObservation& w) {
    return !w.address.empty() && placed.count({w.id, w.address}) > 0;
  };

  std::vector<router::PlacementWorker> target;
  bool target_known = placement.known;
  for (const PoolObservation& p : pools) {
    PoolPlan pp;
    const int desired = std::max(0, p.spec.replicas);
    const int sts = p.statefulset_replicas;
    std::vector<const WorkerObservation*> wanted, leaving;
    for (const WorkerObservation& w : p.workers) {
      (w.ordinal < desired ? wanted : leaving).push_back(&w);
    }
    int wanted_ready = 0, placed_leaving = 0;
    std::vector<router::PlacementWorker> kept;  // placed and still wanted
    for (const WorkerObservation* w : wanted) {
      if (w->ready && !w->address.empty()) ++wanted_ready;
      if (is_placed(*w)) kept.push_back({w->id, w->address});
    }
    for (const WorkerObservation& w : p.workers) {
      if (w.ready) ++pp.ready;
      if (w.ready && is_placed(w)) ++pp.counted;
      if (!w.ready && is_placed(w)) ++pp.placed_not_ready;
    }
    for (const WorkerObservation* w : leaving) placed_leaving += is_placed(*w) ? 1 : 0;
    const bool all_wanted_ready =
        wanted_ready == desired && static_cast<int>(wanted.size()) >= desired;
    const bool observation_current = p.statefulset_current && placement.known;

    // The StatefulSet: grow at once; shrink only once nothing placed is on a leaving worker.
    pp.statefulset_replicas = sts < 0 ? desired : sts;
    if (pp.statefulset_replicas < desired) pp.statefulset_replicas = desired;

    if (!observation_current) {
      pp.phase = PoolPhase::kWaiting;
      pp.message = !placement.known
                       ? absl::StrCat("placement unknown: ", placement.error)
                       : "waiting for the StatefulSet's status to catch up with its spec";
      for (const auto& k : kept) target.push_back(k);
      target_known = target_known && p.statefulset_current;
      plan.pools[p.spec.name] = pp;
      continue;
    }
    std::vector<router::PlacementWorker> mine;
    if (all_wanted_ready) {
      for (const WorkerObservation* w : wanted) mine.push_back({w->id, w->address});
    } else {
      mine = kept;
    }
    const bool placement_changes = mine.size() != kept.size() || placed_leaving > 0;
    if (!all_wanted_ready) {
      pp.phase = PoolPhase::kScalingUp;
      pp.message = absl::StrCat(wanted_ready, " of ", desired, " wanted workers ready");
    } else if (placement_changes) {
      pp.phase = PoolPhase::kPlacing;
      pp.message =
          absl::StrCat("placing onto ", desired, " workers (", placed_leaving, " leaving)");
    } else if (pp.statefulset_replicas > desired) {
      pp.phase = PoolPhase::kScalingDown;
      pp.statefulset_replicas = desired;
      pp.message = absl::StrCat("placed away; removing ", sts - desired, " workers");
    } else {
      pp.phase = PoolPhase::kSteady;
      pp.message = absl::StrCat(desired, " workers placed");
    }
    if (placed_leaving > 0 || pp.phase == PoolPhase::kPlacing) {
      // Keep the leaving workers until the switch away from them is done.
      pp.statefulset_replicas = std::max(pp.statefulset_replicas, std::max(sts, desired));
    }
    for (const auto& w : mine) target.push_back(w);
    plan.pools[p.spec.name] = pp;
  }

  if (target_known && !target.empty()) {
    std::sort(target.begin(), target.end(),
              [](const auto& a, const auto& b) { return a.worker_id < b.worker_id; });
    std::set<std::pair<int32_t, std::string>> want;
    for (const auto& w : target) want.insert({w.worker_id, w.address});
    if (want != placed || !placement.agreed) plan.placement_target = target;
  }
  return plan;
}

}  // namespace moe::op
