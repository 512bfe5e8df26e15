// The placement over a new set of workers (scaling, pool_plan.h): EPLB (placement_algorithm.h)
// from the cluster's measured load, over exactly `workers`, as the next version. Pure; the
// protocol that applies it is router::ApplyRecalibration (load, switch, drain, unload).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "services/router/core/recalibration.h"

namespace moe::op {

// `slots_per_worker` 0 = as many as a worker holds now, and at least enough for every expert to
// fit (ceil(experts / workers)). With no load in the window every expert weighs the same.
// FAILED_PRECONDITION for no workers; the placement algorithm's INVALID_ARGUMENT.
absl::StatusOr<router::RecalibrationReport> PlanPlacementChange(
    const router::ClusterLoad& load, const std::vector<router::PlacementWorker>& workers,
    int slots_per_worker);

}  // namespace moe::op
