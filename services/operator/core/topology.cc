#include "services/operator/core/topology.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe::op {

std::string Fullname(const std::string& cluster) {
  std::string s = cluster.substr(0, 40);
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}

namespace {
std::string Component(const std::string& cluster, const std::string& c) {
  std::string s = absl::StrCat(Fullname(cluster), "-", c).substr(0, 63);
  while (!s.empty() && s.back() == '-') s.pop_back();
  return s;
}
}  // namespace

std::string RouterStatefulSet(const std::string& cluster) { return Component(cluster, "router"); }
std::string GatewayDeployment(const std::string& cluster) { return Component(cluster, "gateway"); }
std::string PoolStatefulSet(const std::string& cluster, const std::string& pool) {
  return Component(cluster, "experts-" + pool);
}
std::string ConfigMapName(const std::string& cluster) { return Component(cluster, "config"); }

int FloorReplicas(const PoolSpec& pool) {
  // One worker: a restarted router starts on a placement whose every worker exists whatever the
  // pool's size (StatefulSets remove the highest ordinals first), and no scale step, nor a new
  // autoscaling bound, changes the routers' config.
  const int most = pool.autoscaling.has_value() ? std::max(pool.replicas, 1) : pool.replicas;
  return std::min(1, most);
}

int32_t WorkerId(const std::vector<PoolSpec>& pools, size_t pool_index, int ordinal) {
  int32_t position = 0;
  for (size_t p = 0; p < pool_index; ++p) position += FloorReplicas(pools[p]);
  if (ordinal < FloorReplicas(pools[pool_index])) return position + ordinal;
  return kExtraWorkerIdBase + static_cast<int32_t>(pool_index) * kMaxPoolReplicas + ordinal;
}

std::optional<WorkerRef> WorkerById(const std::vector<PoolSpec>& pools, int32_t id) {
  if (id < 0) return std::nullopt;
  if (id >= kExtraWorkerIdBase) {
    const int32_t rel = id - kExtraWorkerIdBase;
    const size_t p = static_cast<size_t>(rel / kMaxPoolReplicas);
    const int ordinal = rel % kMaxPoolReplicas;
    if (p >= pools.size() || ordinal < FloorReplicas(pools[p])) return std::nullopt;
    return WorkerRef{p, ordinal};
  }
  int32_t position = 0;
  for (size_t p = 0; p < pools.size(); ++p) {
    const int floor = FloorReplicas(pools[p]);
    if (id < position + floor) return WorkerRef{p, id - position};
    position += floor;
  }
  return std::nullopt;
}

std::string PodAddress(AddressMode mode, const std::string& statefulset, int ordinal,
                       const std::string& ns, const std::string& pod_ip, int port) {
  if (mode == AddressMode::kPodIp) {
    return pod_ip.empty() ? "" : absl::StrCat(pod_ip, ":", port);
  }
  return absl::StrCat(statefulset, "-", ordinal, ".", statefulset, ".", ns, ".svc:", port);
}

}  // namespace moe::op
