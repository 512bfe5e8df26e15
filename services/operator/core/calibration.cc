#include "services/operator/core/calibration.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "services/operator/core/conditions.h"
#include "services/operator/core/cron.h"
#include "services/router/core/placement_algorithm.h"

namespace moe::op {

const char* CalibrationPhaseName(CalibrationResult::Phase phase) {
  switch (phase) {
    case CalibrationResult::Phase::kSucceeded:
      return "Succeeded";
    case CalibrationResult::Phase::kFailed:
      return "Failed";
    case CalibrationResult::Phase::kSkipped:
      return "Skipped";
  }
  return "Unknown";
}

absl::StatusOr<CalibrationDue> IsCalibrationDue(const CalibrationSpec& spec, const Json& status,
                                                absl::Time now) {
  CalibrationDue due;
  const std::string phase = status.is_object() ? status.value("phase", "") : "";
  if (!spec.scheduled) {
    due.run = phase.empty() || phase == "Pending" || phase == "Running";
    if (!due.run) due.reason = "Complete";
    return due;
  }
  auto cron = CronSchedule::Parse(spec.schedule);
  if (!cron.ok()) return cron.status();
  absl::Time from = spec.created;
  if (status.is_object() && status.contains("lastScheduleTime")) {
    if (auto t = ParseRfc3339(status["lastScheduleTime"].get<std::string>()); t.ok()) from = *t;
  }
  const absl::Time next = cron->Next(from);
  due.run = now >= next;
  due.next = due.run ? cron->Next(now) : next;
  if (!due.run) due.reason = "NotYet";
  return due;
}

LoadSnapshot SnapshotOf(const router::ClusterLoad& load) {
  LoadSnapshot s;
  s.placement_version = load.placement.version;
  s.window_tokens = load.window_tokens;
  s.measured = router::HasWorkerTokens(load.worker_tokens);
  const std::vector<double> per_layer =
      s.measured ? router::MeasuredBalancedness(load.placement, load.worker_tokens)
                 : router::ExpectedBalancedness(load.placement, load.expert_tokens);
  s.balancedness = router::MinOverMoeLayers(load.placement, per_layer);
  double sum = 0;
  int n = 0;
  for (int64_t l = 0; l < load.placement.num_layers; ++l) {
    bool moe = false;
    for (int64_t e = 0; e < load.placement.num_experts && !moe; ++e) {
      moe = !load.placement.Replicas(l, e).empty();
    }
    if (moe && static_cast<size_t>(l) < per_layer.size()) {
      sum += per_layer[static_cast<size_t>(l)];
      ++n;
    }
  }
  s.mean_balancedness = n > 0 ? sum / n : 1.0;
  return s;
}

namespace {
Json SnapshotJson(const LoadSnapshot& s) {
  return {{"placementVersion", s.placement_version},
          {"balancedness", std::clamp(s.balancedness, 0.0, 1.0)},
          {"meanBalancedness", std::clamp(s.mean_balancedness, 0.0, 1.0)},
          {"windowTokens", s.window_tokens}};
}
double Min(const std::vector<double>& v) {
  return v.empty() ? 1.0 : *std::min_element(v.begin(), v.end());
}
}  // namespace

Json CalibrationStatus(const CalibrationSpec& spec, const Json& old, const CalibrationResult& r,
                       absl::Time start, absl::Time end, std::optional<absl::Time> next) {
  Json s = old.is_object() ? old : Json::object();
  s["observedGeneration"] = spec.generation;
  s["phase"] = CalibrationPhaseName(r.phase);
  s["message"] = r.message;
  s["startTime"] = Rfc3339(start);
  s["completionTime"] = Rfc3339(end);
  s["runs"] = s.value("runs", int64_t{0}) + 1;
  if (spec.scheduled) {
    s["lastScheduleTime"] = Rfc3339(start);
    if (next.has_value() && *next != absl::InfiniteFuture()) {
      s["nextScheduleTime"] = Rfc3339(*next);
    }
  }
  if (r.before.has_value()) s["before"] = SnapshotJson(*r.before);
  if (r.after.has_value()) s["after"] = SnapshotJson(*r.after);
  if (r.report.has_value()) {
    s["expectedBalancedness"] = std::clamp(Min(r.report->balancedness_after), 0.0, 1.0);
  }
  Json routers = Json::array();
  for (const std::string& name : r.routers) {
    Json e = {{"name", name},
              {"drained", r.phase == CalibrationResult::Phase::kSucceeded && r.report.has_value() &&
                              !spec.dry_run}};
    if (r.after.has_value()) e["placementVersion"] = r.after->placement_version;
    routers.push_back(e);
  }
  s["routers"] = routers;
  const bool failed = r.phase == CalibrationResult::Phase::kFailed;
  const std::string reason = CalibrationPhaseName(r.phase);
  SetCondition(s["conditions"], "Complete", !failed, reason, r.message, end, spec.generation);
  SetCondition(s["conditions"], "Failed", failed, failed ? "RunFailed" : reason, r.message, end,
               spec.generation);
  return s;
}

router::RecalibrationCoordinatorOptions CoordinatorOptions(const ClusterSpec& c) {
  const RecalibrationPolicy& p = c.recalibration;
  router::RecalibrationCoordinatorOptions o;
  o.interval = std::max(p.interval, absl::Milliseconds(10));
  o.window = std::clamp(p.window, absl::Seconds(1), absl::Hours(1));
  o.threshold = std::clamp(p.imbalance_threshold, 0.0, 1.0);
  o.sustain = std::clamp(p.sustain, 1, 1000);
  o.min_tokens = std::max<int64_t>(0, p.min_tokens);
  o.cooldown = std::clamp(p.cooldown, absl::ZeroDuration(), absl::Hours(24));
  o.slots_per_worker = std::max(0, c.slots_per_worker);
  return o;
}

}  // namespace moe::op
