#include "services/operator/core/autoscaler.h"

#include <algorithm>
#include <cmath>

namespace moe::op {

absl::Status AutoscalerOptions::Validate() const {
  if (!(tolerance >= 0 && tolerance < 1)) return absl::InvalidArgumentError("tolerance in [0, 1)");
  if (scale_up_stabilization < absl::ZeroDuration() ||
      scale_down_stabilization < absl::ZeroDuration() || cooldown < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("stabilization windows and cooldown must be >= 0");
  }
  if (max_scale_up_step < 1 || max_scale_down_step < 1) {
    return absl::InvalidArgumentError("scale steps must be >= 1");
  }
  return absl::OkStatus();
}

ScaleDecision Recommend(const AutoscalerOptions& o, AutoscalerState& state, absl::Time now,
                        int current, std::optional<double> utilisation, double target,
                        Bounds bounds) {
  ScaleDecision d;
  d.replicas = current;
  d.recommended = current;
  if (!utilisation.has_value() || target <= 0) {
    d.reason = "NoMetrics";
    return d;
  }
  const double ratio = *utilisation / target;
  int rec = current;
  if (std::abs(ratio - 1.0) > o.tolerance) {
    rec = static_cast<int>(std::ceil(std::max(1, current) * ratio - 1e-9));
  }
  rec = std::clamp(rec, bounds.min_replicas, bounds.max_replicas);
  d.recommended = rec;
  if (!state.first_sample.has_value()) state.first_sample = now;
  state.recommendations.emplace_back(now, rec);
  const absl::Duration keep = std::max(o.scale_up_stabilization, o.scale_down_stabilization);
  while (!state.recommendations.empty() && state.recommendations.front().first < now - keep) {
    state.recommendations.pop_front();
  }
  // Lowest (highest) recommendation over the up (down) window.
  int lowest = rec, highest = rec;
  for (const auto& [t, r] : state.recommendations) {
    if (t >= now - o.scale_up_stabilization) lowest = std::min(lowest, r);
    if (t >= now - o.scale_down_stabilization) highest = std::max(highest, r);
  }
  const bool covered_up = now - *state.first_sample >= o.scale_up_stabilization;
  const bool covered_down = now - *state.first_sample >= o.scale_down_stabilization;
  int next = current;
  if (current < bounds.min_replicas) {
    next = bounds.min_replicas;
  } else if (current > bounds.max_replicas) {
    next = bounds.max_replicas;
  } else if (lowest > current) {
    if (!covered_up) {
      d.reason = "Stabilizing";
      return d;
    }
    next = std::min(lowest, current + o.max_scale_up_step);
  } else if (highest < current) {
    if (!covered_down) {
      d.reason = "Stabilizing";
      return d;
    }
    next = std::max(highest, current - o.max_scale_down_step);
  }
  if (next == current) {
    d.reason = rec == current ? "WithinTolerance" : "Stabilizing";
    return d;
  }
  if (state.last_change.has_value() && now - *state.last_change < o.cooldown &&
      current >= bounds.min_replicas && current <= bounds.max_replicas) {
    d.reason = "Cooldown";
    return d;
  }
  d.replicas = next;
  d.reason = next > current ? "ScaleUp" : "ScaleDown";
  state.last_change = now;
  // The new size's first samples judge afresh.
  state.recommendations.clear();
  state.first_sample.reset();
  return d;
}

}  // namespace moe::op
