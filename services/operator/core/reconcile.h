// One reconcile of a MoECluster as a pure function: the spec, the chart's rendered objects, the
// observed objects, pods, the routers' placement and the metrics in; the objects to apply and
// delete, the placement to switch to, and the statuses out. The controller (controller.h)
// gathers the inputs (informer caches, GetStats, Prometheus, the renderer) and carries out the
// outputs (server-side apply, delete, the recalibration protocol, the status subresource).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "services/operator/core/children.h"
#include "services/operator/core/cluster_spec.h"
#include "services/operator/core/cluster_status.h"
#include "services/operator/core/pool_plan.h"
#include "services/operator/core/topology.h"

namespace moe::op {

struct ReconcileInput {
  ClusterSpec cluster;
  Json cluster_status = Json::object();  // the MoECluster's current status
  // The effective pools in id order (entries, then standalone ExpertPools), each with the
  // desired replicas (after the autoscaler).
  std::vector<PoolSpec> pools;
  std::map<std::string, Json> expert_pools;  // observed ExpertPool objects by object name
  std::vector<Json> rendered;                // the chart for ChartValues(cluster, pools)
  std::vector<Json> owned;                   // observed objects the cluster controls
  std::vector<Json> pods;                    // observed pods labelled with the cluster
  PlacementObservation placement;
  std::map<int32_t, double> utilisation;  // worker id -> moe_expert_replica_utilisation
  std::optional<double> balancedness;
  std::optional<absl::Time> last_recalibration;
  std::string recalibration_error;
  // What this operator last applied (ObjectHash), by key: unchanged objects that exist are not
  // applied again.
  std::map<ObjectKey, uint64_t> applied;
  AddressMode address_mode = AddressMode::kDns;
  int expert_port = 50052;
  int gateway_service_port = 80;
  absl::Time now;
};

struct ReconcileOutput {
  std::vector<Json> desired;      // every object the cluster should own
  std::vector<Json> apply;        // of those, the ones to (re)apply now
  std::vector<ObjectKey> remove;  // owned objects to delete
  ClusterPlan plan;
  std::vector<PoolObservation> pools;  // as observed, id order
  Json cluster_status;
  std::map<std::string, Json> pool_status;  // by ExpertPool object name
  std::vector<std::string> events;          // "Reason: message" for the cluster
};

// INVALID_ARGUMENT from DesiredObjects (a kind the operator does not own).
absl::StatusOr<ReconcileOutput> Reconcile(const ReconcileInput& in);

// The pools' workers from their StatefulSets and pods (`owned`, `pods`).
std::vector<PoolObservation> ObservePools(const ClusterSpec& cluster,
                                          const std::vector<PoolSpec>& pools,
                                          const std::vector<Json>& owned,
                                          const std::vector<Json>& pods, AddressMode mode,
                                          int expert_port);

// Whether a pod's Ready condition is True (and it is not being deleted).
bool PodReady(const Json& pod);

// A hash of an object's applied content (stable across runs).
uint64_t ObjectHash(const Json& object);

}  // namespace moe::op
