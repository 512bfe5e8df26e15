// The expert-pool autoscaler's decision (DESIGN.md §2: Prometheus metrics drive autoscaling):
// the HPA's rule with its damping, as a pure function of the pool's utilisation history.
//
//   recommendation = ceil(current * utilisation / target), unchanged while the ratio is within
//                    `tolerance` of 1, clamped to the bounds;
//   scale up       to the LOWEST recommendation of the last `scale_up_stabilization` (the load
//                  must stay high), at most `max_scale_up_step` workers at a time;
//   scale down     to the HIGHEST recommendation of the last `scale_down_stabilization` (it must
//                  stay low), at most `max_scale_down_step` at a time;
//   nothing        within `cooldown` of the last change (a scale step also recalibrates: the
//                  window must show the new placement's load before the next judgement).
// A window without samples (no metric) changes nothing and restarts no timer.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "services/operator/core/cluster_spec.h"

namespace moe::op {

struct AutoscalerOptions {
  double tolerance = 0.1;
  absl::Duration scale_up_stabilization = absl::Seconds(30);
  absl::Duration scale_down_stabilization = absl::Minutes(5);
  absl::Duration cooldown = absl::Minutes(2);
  int max_scale_up_step = 2;
  int max_scale_down_step = 1;
  absl::Status Validate() const;
};

// Per pool; kept by the caller between calls.
struct AutoscalerState {
  std::deque<std::pair<absl::Time, int>> recommendations;  // oldest first
  std::optional<absl::Time> last_change;
  // When the current high (low) streak started: a stabilization window must be covered by
  // samples before it can act.
  std::optional<absl::Time> first_sample;
};

struct ScaleDecision {
  int replicas = 0;     // the new desired replicas (== current: no change)
  int recommended = 0;  // this sample's raw recommendation
  // "ScaleUp", "ScaleDown", "WithinTolerance", "Cooldown", "NoMetrics", "Stabilizing"
  std::string reason;
};

// `utilisation`: the pool's mean worker utilisation now (nullopt: no data). `target` in (0, 1].
// REQUIRES: options.Validate() is OK, bounds.min_replicas <= bounds.max_replicas.
ScaleDecision Recommend(const AutoscalerOptions& options, AutoscalerState& state, absl::Time now,
                        int current, std::optional<double> utilisation, double target,
                        Bounds bounds);

}  // namespace moe::op
