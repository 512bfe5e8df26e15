// The objects a MoECluster owns: the chart's rendered objects (chart_values.h) made the
// operator's, plus one ExpertPool per spec.expertPools entry. Pure functions.
//
// What the operator changes in a rendered object, and nothing else:
//   - metadata.namespace (the cluster's), ownerReferences (the MoECluster, controller=true:
//     Kubernetes' garbage collector deletes them with it), labels
//     app.kubernetes.io/managed-by=moe-operator and moe-cluster.io/cluster=<name> (on the object
//     and on pod templates: the operator's watches select by them);
//   - spec.replicas of each expert pool's StatefulSet: the pool plan's (pool_plan.h), since
//     workers are added and removed live with the recalibration protocol, not by re-rendering.
// A kind outside kOwnedKinds is refused (the operator's RBAC names exactly those).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/operator/core/cluster_spec.h"

namespace moe::op {

inline constexpr char kManagedByLabel[] = "app.kubernetes.io/managed-by";
inline constexpr char kManagedBy[] = "moe-operator";
inline constexpr char kClusterLabel[] = "moe-cluster.io/cluster";
inline constexpr char kPoolLabel[] = "moe-cluster.io/pool";
inline constexpr char kFinalizer[] = "moe-cluster.io/cleanup";

// A kind the operator applies, with its REST path pieces.
struct Kind {
  const char* api_version;  // "apps/v1"
  const char* kind;         // "StatefulSet"
  const char* resource;     // "statefulsets"
};
// Every kind the operator applies to a cluster (and watches), in apply order: configuration
// before the workloads that mount it.
const std::vector<Kind>& OwnedKinds();
// nullptr when `kind` is not one of them.
const Kind* FindKind(const std::string& api_version, const std::string& kind);

// namespace/kind/name of an object.
struct ObjectKey {
  std::string api_version;
  std::string kind;
  std::string ns;
  std::string name;
  auto operator<=>(const ObjectKey&) const = default;
  std::string DebugString() const;  // "apps/v1 StatefulSet moe/x-router"
};
ObjectKey KeyOf(const Json& object);

// The owner reference of `owner` (a MoECluster object).
Json OwnerReference(const ClusterSpec& owner);
// Whether `object` is controlled by the object with `uid`.
bool IsControlledBy(const Json& object, const std::string& uid);

// `rendered`: the chart's output for ChartValues(cluster, pools). `statefulset_replicas`:
// pool name -> replicas of its StatefulSet. `pool_replicas`: pool name -> the ExpertPool's
// spec.replicas to write (entries only). Returns the objects to apply, ExpertPools first.
// INVALID_ARGUMENT for a rendered kind the operator does not own, or an object without a name.
absl::StatusOr<std::vector<Json>> DesiredObjects(
    const ClusterSpec& cluster, const std::vector<Json>& rendered,
    const std::map<std::string, int>& statefulset_replicas,
    const std::map<std::string, int>& pool_replicas);

// The ExpertPool object of entry `pool` of `cluster`, replicas `replicas`.
Json ExpertPoolObject(const ClusterSpec& cluster, const PoolSpec& pool, int replicas);

// Of `owned` (objects controlled by the cluster), those `desired` no longer has: to delete
// (a pool removed from the spec, a role disabled).
std::vector<ObjectKey> Orphans(const std::vector<Json>& owned, const std::vector<Json>& desired);

}  // namespace moe::op
