#include "services/router/core/recalibration.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
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

absl::StatusOr<ClusterLoad> AggregateLoad(absl::Span<const RouterLoadReport> reports) {
  if (reports.empty()) return absl::FailedPreconditionError("no routers to recalibrate");
  ClusterLoad load;
  load.placement = reports[0].placement;
  load.first_router_id = reports[0].router_id;
  const PlacementTable& current = load.placement;
  load.expert_tokens.assign(current.replicas.size(), 0);
  for (const RouterLoadReport& r : reports) {
    if (r.placement.version != current.version || r.placement.replicas != current.replicas ||
        r.placement.workers != current.workers) {
      return absl::FailedPreconditionError(absl::StrCat(
          "routers disagree on the placement (", reports[0].router_id, " has v", current.version,
          ", ", r.router_id, " has v", r.placement.version, "): rerun to converge"));
    }
    if (r.expert_tokens.size() != load.expert_tokens.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("router ", r.router_id, ": load window of another shape"));
    }
    for (size_t i = 0; i < r.expert_tokens.size(); ++i) load.expert_tokens[i] += r.expert_tokens[i];
    for (const auto& [id, tokens] : r.worker_tokens) {
      if (tokens.size() != static_cast<size_t>(current.num_layers)) {
        return absl::FailedPreconditionError(
            absl::StrCat("router ", r.router_id, ": worker ", id, " tokens of another shape"));
      }
      auto& dst = load.worker_tokens[id];
      if (dst.empty()) dst.assign(tokens.size(), 0);
      for (size_t l = 0; l < tokens.size(); ++l) dst[l] += tokens[l];
    }
  }
  for (uint64_t t : load.expert_tokens) load.window_tokens += t;
  return load;
}

std::vector<double> MeasuredBalancedness(const PlacementTable& table,
                                         const WorkerTokens& worker_tokens) {
  std::vector<double> out;
  for (int64_t l = 0; l < table.num_layers; ++l) {
    bool moe = false;
    for (int64_t e = 0; e < table.num_experts && !moe; ++e) moe = !table.Replicas(l, e).empty();
    if (!moe) {
      out.push_back(1.0);
      continue;
    }
    std::vector<double> loads;
    for (const PlacementWorker& w : table.workers) {
      auto it = worker_tokens.find(w.worker_id);
      loads.push_back(it == worker_tokens.end() || static_cast<size_t>(l) >= it->second.size()
                          ? 0.0
                          : static_cast<double>(it->second[static_cast<size_t>(l)]));
    }
    out.push_back(Balancedness(loads));
  }
  return out;
}

double MinOverMoeLayers(const PlacementTable& table, absl::Span<const double> per_layer) {
  double min = 1.0;
  for (int64_t l = 0; l < table.num_layers && l < static_cast<int64_t>(per_layer.size()); ++l) {
    bool moe = false;
    for (int64_t e = 0; e < table.num_experts && !moe; ++e) moe = !table.Replicas(l, e).empty();
    if (moe) min = std::min(min, per_layer[static_cast<size_t>(l)]);
  }
  return min;
}

bool HasWorkerTokens(const WorkerTokens& worker_tokens) {
  for (const auto& [id, tokens] : worker_tokens) {
    for (uint64_t t : tokens) {
      if (t > 0) return true;
    }
  }
  return false;
}

absl::StatusOr<RecalibrationReport> PlanRecalibration(const ClusterLoad& load,
                                                      int slots_per_worker) {
  const PlacementTable& current = load.placement;
  if (current.workers.empty()) return absl::FailedPreconditionError("placement has no workers");
  RecalibrationReport report;
  report.window_tokens = load.window_tokens;
  report.previous_version = current.version;
  report.slots_per_worker =
      slots_per_worker > 0 ? slots_per_worker : MaxExpertsPerWorker(current) + 1;
  ASSIGN_OR_RETURN(
      report.placement,
      ComputePlacement(current, load.expert_tokens, report.slots_per_worker, current.version + 1));
  report.version = report.placement.version;
  report.balancedness_before = ExpectedBalancedness(current, load.expert_tokens);
  report.balancedness_after = ExpectedBalancedness(report.placement, load.expert_tokens);
  for (const auto& [a, keys] : PlacementDiff(current, report.placement)) {
    report.experts_loaded += static_cast<int64_t>(keys.size());
  }
  for (const auto& [a, keys] : PlacementDiff(report.placement, current)) {
    report.experts_unloaded += static_cast<int64_t>(keys.size());
  }
  return report;
}

absl::Status ApplyRecalibration(RecalibrationTransport& transport, const PlacementTable& from,
                                const PlacementTable& to) {
  for (const auto& [address, keys] : PlacementDiff(from, to)) {
    RETURN_IF_ERROR(transport.LoadExperts(address, keys));
  }
  for (int i = 0; i < transport.num_routers(); ++i) RETURN_IF_ERROR(transport.SetPlacement(i, to));
  for (const auto& [address, keys] : PlacementDiff(to, from)) {
    RETURN_IF_ERROR(transport.UnloadExperts(address, keys));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> CompleteInterruptedSwitch(RecalibrationTransport& transport,
                                              std::vector<RouterLoadReport>& reports) {
  if (reports.empty()) return 0;
  size_t newest = 0;
  for (size_t i = 1; i < reports.size(); ++i) {
    if (reports[i].placement.version > reports[newest].placement.version) newest = i;
  }
  const PlacementTable target = reports[newest].placement;
  auto same = [](const PlacementTable& a, const PlacementTable& b) {
    return a.version == b.version && a.replicas == b.replicas && a.workers == b.workers;
  };
  std::vector<size_t> behind;
  for (size_t i = 0; i < reports.size(); ++i) {
    const PlacementTable& t = reports[i].placement;
    if (same(t, target)) continue;
    if (t.version == target.version) {
      return absl::FailedPreconditionError(
          absl::StrCat("routers ", reports[newest].router_id, " and ", reports[i].router_id,
                       " both use placement v", t.version, " but with different tables"));
    }
    behind.push_back(i);
  }
  if (behind.empty()) return 0;
  if (reports.size() != static_cast<size_t>(transport.num_routers())) {
    return absl::InvalidArgumentError("one report per router is required");
  }
  for (size_t i : behind) {
    MOE_LOG_INFO("recalibration: router {} is on placement v{}, finishing the switch to v{}",
                 reports[i].router_id, reports[i].placement.version, target.version);
    RETURN_IF_ERROR(transport.SetPlacement(static_cast<int>(i), target));
  }
  // Every router now uses `target`: what only the older tables placed can go.
  std::vector<PlacementTable> older;
  for (size_t i : behind) {
    bool seen = false;
    for (const PlacementTable& t : older) seen = seen || same(t, reports[i].placement);
    if (!seen) older.push_back(reports[i].placement);
    reports[i].placement = target;
  }
  for (const PlacementTable& old_table : older) {
    for (const auto& [address, keys] : PlacementDiff(target, old_table)) {
      RETURN_IF_ERROR(transport.UnloadExperts(address, keys));
    }
  }
  return static_cast<int>(behind.size());
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
  int converged = 0;
  if (!options.dry_run) {
    ASSIGN_OR_RETURN(converged, CompleteInterruptedSwitch(transport, reports));
  }
  ASSIGN_OR_RETURN(ClusterLoad load, AggregateLoad(reports));
  ASSIGN_OR_RETURN(RecalibrationReport report, PlanRecalibration(load, options.slots_per_worker));
  report.routers_converged = converged;
  if (options.dry_run) return report;
  RETURN_IF_ERROR(ApplyRecalibration(transport, load.placement, report.placement));
  return report;
}

}  // namespace moe::router
