// The MoECluster's and its ExpertPools' status (deploy/crds): per-role replicas and ready
// counts, placement version, balancedness, and the conditions Ready, Progressing, Degraded,
// Recalibrating (ExpertPool: Available, Progressing, Degraded), each with a reason. Pure.
#pragma once

#include <optional>
#include <string>

#include "absl/time/time.h"
#include "services/operator/core/cluster_spec.h"
#include "services/operator/core/pool_plan.h"

namespace moe::op {

struct RoleObservation {
  bool wanted = false;   // the role is rendered
  bool present = false;  // its workload exists
  int replicas = 0;      // desired (spec.replicas; status.replicas when an HPA owns it)
  int ready = 0;         // status.readyReplicas
  bool rolling = false;  // status older than spec, or not every replica updated
};
// A Deployment or StatefulSet as the API returns it (null: absent).
RoleObservation RoleOf(const Json* workload, bool wanted);

struct ClusterObservation {
  RoleObservation gateway, routers, kv_store, asr, tts;
  std::vector<PoolObservation> pools;  // in id order
  ClusterPlan plan;
  PlacementObservation placement;
  std::optional<double> balancedness;  // min over MoE layers, measured, last window
  std::optional<absl::Time> last_recalibration;
  std::string endpoint;             // the gateway's in-cluster URL
  std::string error;                // render/apply failure this reconcile ("" = none)
  std::string recalibration_error;  // the last recalibration's failure ("" = none)
  bool recalibrating = false;
};

// `old`: the current status (its conditions keep their transition times).
Json ClusterStatus(const ClusterSpec& cluster, const Json& old, const ClusterObservation& o,
                   absl::Time now);

// One pool's status. `generation`: the ExpertPool's metadata.generation.
Json PoolStatus(const PoolObservation& pool, const PoolPlan& plan, const Json& old,
                int64_t generation, const std::string& selector, std::optional<double> utilisation,
                int resident_experts, absl::Time now);

}  // namespace moe::op
