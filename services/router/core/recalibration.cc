#include "services/router/core/recalibration.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "services/router/core/placement_algorithm.h"

namespace moe::router {

std::map<std::string, std::vector<model::ExpertKey>> PlacementDiff(const PlacementTable& from,
                                                                   const PlacementTable& to) {
  std::map<std::string, std::vector<model::ExpertKey>> out;
  const auto before = from.ExpertsByWorker();
  for (const auto& [id, keys] : to.ExpertsByWorker()) {
    const PlacementWorker* w = to.FindWorker(id);
    if (w == nullptr) continue;
    auto it = before.find(id);
    const PlacementWorker* old = from.FindWorker(id);
    std::set<model::ExpertKey> had;
    if (it != before.end() && old != nullptr && old->address == w->address) {
      had.insert(it->second.begin(), it->second.end());
    }
    for (const model::ExpertKey& k : keys) {
      if (!had.count(k)) out[w->address].push_back(k);
    }
  }
  return out;
}

absl::StatusOr<RecalibrationReport> Recalibrate(RecalibrationTransport& transport,
                                                const RecalibrationOptions& options) {
  const int n = transport.num_routers();
  if (n == 0) return absl::FailedPreconditionError("no routers to recalibrate");
  std::vector<RouterLoadReport> reports;
  for (int i = 0; i < n; ++i) {
    ASSIGN_OR_RETURN(RouterLoadReport r, transport.GetStats(i, options.window));
    reports.push_back(std::move(r));
  }
  const PlacementTable& current = reports[0].placement;
  std::vector<uint64_t> tokens(current.replicas.size(), 0);
  RecalibrationReport report;
  for (const RouterLoadReport& r : reports) {
    if (r.placement.version != current.version || r.placement.replicas != current.replicas ||
        r.placement.workers != current.workers) {
      return absl::FailedPreconditionError(absl::StrCat(
          "routers disagree on the placement (", reports[0].router_id, " has v", current.version,
          ", ", r.router_id, " has v", r.placement.version, "): rerun to converge"));
    }
    if (r.expert_tokens.size() != tokens.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("router ", r.router_id, ": load window of another shape"));
    }
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] += r.expert_tokens[i];
  }
  for (uint64_t t : tokens) report.window_tokens += t;
  if (current.workers.empty()) return absl::FailedPreconditionError("placement has no workers");
  report.previous_version = current.version;
  report.slots_per_worker =
      options.slots_per_worker > 0 ? options.slots_per_worker : MaxExpertsPerWorker(current) + 1;
  ASSIGN_OR_RETURN(report.placement,
                   ComputePlacement(current, tokens, report.slots_per_worker, current.version + 1));
  report.version = report.placement.version;
  report.balancedness_before = ExpectedBalancedness(current, tokens);
  report.balancedness_after = ExpectedBalancedness(report.placement, tokens);
  const auto to_load = PlacementDiff(current, report.placement);
  const auto to_unload = PlacementDiff(report.placement, current);
  for (const auto& [a, keys] : to_load) report.experts_loaded += static_cast<int64_t>(keys.size());
  for (const auto& [a, keys] : to_unload) {
    report.experts_unloaded += static_cast<int64_t>(keys.size());
  }
  if (options.dry_run) return report;

  for (const auto& [address, keys] : to_load) {
    RETURN_IF_ERROR(transport.LoadExperts(address, keys));
  }
  for (int i = 0; i < n; ++i) RETURN_IF_ERROR(transport.SetPlacement(i, report.placement));
  for (const auto& [address, keys] : to_unload) {
    RETURN_IF_ERROR(transport.UnloadExperts(address, keys));
  }
  return report;
}

}  // namespace moe::router
