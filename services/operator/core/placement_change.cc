#include "services/operator/core/placement_change.h"

#include <algorithm>

#include "common/base/status_macros.h"
#include "services/router/core/placement_algorithm.h"

namespace moe::op {

absl::StatusOr<router::RecalibrationReport> PlanPlacementChange(
    const router::ClusterLoad& load, const std::vector<router::PlacementWorker>& workers,
    int slots_per_worker) {
  if (workers.empty()) return absl::FailedPreconditionError("no workers to place experts on");
  const router::PlacementTable& current = load.placement;
  router::PlacementTable over = current;
  over.workers = workers;
  const int ne = current.num_experts;
  const int w = static_cast<int>(workers.size());
  int slots = slots_per_worker;
  if (slots <= 0) slots = std::max(router::MaxExpertsPerWorker(current), (ne + w - 1) / w);
  slots = std::min(slots, ne);
  std::vector<uint64_t> tokens = load.expert_tokens;
  if (load.window_tokens == 0) std::fill(tokens.begin(), tokens.end(), 1);
  router::RecalibrationReport report;
  report.previous_version = current.version;
  report.slots_per_worker = slots;
  report.window_tokens = load.window_tokens;
  ASSIGN_OR_RETURN(report.placement,
                   router::ComputePlacement(over, tokens, slots, current.version + 1));
  report.version = report.placement.version;
  report.balancedness_before = router::ExpectedBalancedness(current, tokens);
  report.balancedness_after = router::ExpectedBalancedness(report.placement, tokens);
  for (const auto& [a, keys] : router::PlacementDiff(current, report.placement)) {
    report.experts_loaded += static_cast<int64_t>(keys.size());
  }
  for (const auto& [a, keys] : router::PlacementDiff(report.placement, current)) {
    report.experts_unloaded += static_cast<int64_t>(keys.size());
  }
  return report;
}

}  // namespace moe::op
