// RouterCalibration runs (deploy/crds/README.md): when one is due, and its status from what the
// run measured. The run itself (GetStats, router::Recalibrate over the gRPC transport) is the
// controller's; these are pure. Also the MoECluster's recalibration policy as the
// RecalibrationCoordinator's options (mode Threshold: `moe admin coordinate` semantics).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/operator/core/cluster_spec.h"
#include "services/router/core/recalibration.h"
#include "services/router/core/recalibration_coordinator.h"

namespace moe::op {

struct CalibrationDue {
  bool run = false;
  std::optional<absl::Time> next;  // Scheduled: the next run (status.nextScheduleTime)
  std::string reason;              // why not (Complete, NotYet, ...)
};
// OneShot: due until it has a final phase (Succeeded, Failed, Skipped); a Running one left by
// an operator that stopped mid-run is run again. Scheduled: due when now reaches the cron time
// after status.lastScheduleTime (or after creation). INVALID_ARGUMENT for a bad schedule.
absl::StatusOr<CalibrationDue> IsCalibrationDue(const CalibrationSpec& spec, const Json& status,
                                                absl::Time now);

// Placement version and measured balancedness of a window (status.before / .after).
struct LoadSnapshot {
  uint64_t placement_version = 0;
  double balancedness = 1.0;       // lowest MoE layer, measured (expected when not measured)
  double mean_balancedness = 1.0;  // mean over MoE layers
  uint64_t window_tokens = 0;
  bool measured = false;  // worker tokens were reported
};
LoadSnapshot SnapshotOf(const router::ClusterLoad& load);

struct CalibrationResult {
  enum class Phase { kSucceeded, kFailed, kSkipped };
  Phase phase = Phase::kSucceeded;
  std::string message;
  std::optional<LoadSnapshot> before;
  std::optional<LoadSnapshot> after;  // version and expected balancedness of the new placement
  std::optional<router::RecalibrationReport> report;
  std::vector<std::string> routers;  // router ids that switched (or would)
};
// The status after a run that started at `start` and ended at `end` (`old`: the status before).
Json CalibrationStatus(const CalibrationSpec& spec, const Json& old, const CalibrationResult& r,
                       absl::Time start, absl::Time end, std::optional<absl::Time> next);
const char* CalibrationPhaseName(CalibrationResult::Phase phase);

// spec.recalibration (mode Threshold) as coordinator options; slots from spec.placement.
router::RecalibrationCoordinatorOptions CoordinatorOptions(const ClusterSpec& cluster);

}  // namespace moe::op
