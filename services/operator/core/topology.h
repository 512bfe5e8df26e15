// Names and identities of a MoECluster's workloads, as the chart renders them (deploy/k8s:
// fullnameOverride = the cluster's name), and the expert workers' ids in the placement table.
//
// Worker ids. The chart lists every pool's workers in the routers' experts.workers (pool order,
// then ordinal; worker i has id i) and places each pool's experts on its own workers: that is
// placement version 0, the one a router starts with. The operator renders that list with each
// pool's *floor* (FloorReplicas: the workers a pool always has), so that scaling never changes
// the routers' config (no rollout of every pod on each scale step). Workers above the floor are
// added and removed live by the recalibration protocol, under ids of their own that no floor
// worker can take: kExtraWorkerIdBase + pool_index * kMaxPoolReplicas + ordinal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "services/operator/core/cluster_spec.h"

namespace moe::op {

inline constexpr int32_t kExtraWorkerIdBase = 1 << 16;
inline constexpr int32_t kMaxPoolReplicas = 1024;  // the CRDs' maximum

// The chart's fullname for a cluster (fullnameOverride, truncated to 40, no trailing '-').
std::string Fullname(const std::string& cluster);
std::string RouterStatefulSet(const std::string& cluster);
std::string GatewayDeployment(const std::string& cluster);
std::string PoolStatefulSet(const std::string& cluster, const std::string& pool);
std::string ConfigMapName(const std::string& cluster);

// Workers of `pool` the routers' config always names (placement version 0): 1, or 0 for a pool
// of 0 replicas that is not autoscaled (an autoscaled pool keeps at least one worker).
int FloorReplicas(const PoolSpec& pool);

// The placement id of worker `ordinal` of pools[pool_index].
int32_t WorkerId(const std::vector<PoolSpec>& pools, size_t pool_index, int ordinal);

struct WorkerRef {
  size_t pool_index = 0;
  int ordinal = 0;
};
// The inverse of WorkerId; nullopt for an id no pool of `pools` can have.
std::optional<WorkerRef> WorkerById(const std::vector<PoolSpec>& pools, int32_t id);

// How the operator (and the placement tables it writes) address pods.
enum class AddressMode {
  kDns,    // "<pod>.<statefulset>.<namespace>.svc:<port>": stable across restarts (the chart's)
  kPodIp,  // "<status.podIP>:<port>": no cluster DNS needed (local stand-ins)
};
// The address of StatefulSet pod `ordinal`; for kPodIp `pod_ip` ("" = unknown: returns "").
std::string PodAddress(AddressMode mode, const std::string& statefulset, int ordinal,
                       const std::string& ns, const std::string& pod_ip, int port);

}  // namespace moe::op
