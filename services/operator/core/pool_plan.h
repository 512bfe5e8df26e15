// Expert pools follow their desired replicas through the recalibration protocol (DESIGN.md §2,
// deploy/crds/README.md "ExpertPool"): a pure plan from what is observed, recomputed at every
// reconcile, so that an operator restarted (or a new leader) at any step carries on.
//
//   scale up:   StatefulSet replicas := desired; wait until every wanted worker is ready; then
//               place onto them (load, switch every router, drain, unload); only then do they
//               count (ExpertPool status.readyReplicas).
//   scale down: first place away from the workers that go (each expert keeps a live replica in
//               every version: the new placement is computed over the workers that stay, and
//               SetPlacement returns once the old version drained); then StatefulSet replicas :=
//               desired (the highest ordinals go).
//
// The placement target is cluster-wide (one table): per pool, its wanted workers (ordinal <
// desired) when all of them are ready and addressed, else the ones it has placed already and
// still wants. Nothing moves while the routers' placement is unknown, or while a StatefulSet's
// status is older than its spec (a stale observation).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "services/operator/core/cluster_spec.h"
#include "services/router/core/placement_table.h"

namespace moe::op {

struct WorkerObservation {
  int ordinal = 0;
  int32_t id = 0;       // topology.h WorkerId
  std::string pod;      // "<statefulset>-<ordinal>"
  std::string address;  // "" when not known yet (no pod IP)
  bool exists = false;  // the pod exists
  bool ready = false;   // its Ready condition is True
};

struct PoolObservation {
  PoolSpec spec;                    // spec.replicas = the desired workers
  int statefulset_replicas = -1;    // -1: no StatefulSet yet
  bool statefulset_current = true;  // status.observedGeneration >= metadata.generation
  // Ordinals 0 .. max(desired, statefulset_replicas) - 1, in order.
  std::vector<WorkerObservation> workers;
};

// The routers' placement, from GetStats on every router.
struct PlacementObservation {
  bool known = false;                            // every router answered
  bool agreed = false;                           // all on one version and table
  uint64_t version = 0;                          // the newest
  std::vector<router::PlacementWorker> workers;  // of the newest table
  // worker id -> the (layer * num_experts + expert) pairs the newest table places on it
  std::map<int32_t, std::set<int64_t>> resident;
  std::string error;  // why not known
};

enum class PoolPhase {
  kSteady,       // placed == wanted == StatefulSet
  kScalingUp,    // waiting for new workers to be ready
  kPlacing,      // the placement must change (onto new or away from leaving workers)
  kScalingDown,  // placed away; the StatefulSet shrinks
  kWaiting,      // nothing can move: placement unknown or a stale observation
};
const char* PoolPhaseName(PoolPhase phase);  // "Steady", "ScalingUp", ...

struct PoolPlan {
  PoolPhase phase = PoolPhase::kSteady;
  int statefulset_replicas = 0;  // to apply
  int counted = 0;               // ready and placed workers (status.readyReplicas)
  int ready = 0;                 // ready workers, placed or not
  int placed_not_ready = 0;      // placed workers that are not ready (routers route around)
  std::string message;           // for conditions and events
};

struct ClusterPlan {
  std::map<std::string, PoolPlan> pools;  // by pool name
  // Set when the routers must switch to a placement over exactly these workers (id order).
  std::optional<std::vector<router::PlacementWorker>> placement_target;
  bool steady() const;  // every pool steady and no placement change
};

// REQUIRES: pools in id order (topology.h), workers in ordinal order.
ClusterPlan PlanPools(const std::vector<PoolObservation>& pools,
                      const PlacementObservation& placement);

}  // namespace moe::op
