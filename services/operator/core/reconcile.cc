#include "services/operator/core/reconcile.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace moe::op {

bool PodReady(const Json& pod) {
  const Json meta = pod.value("metadata", Json::object());
  if (meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null()) return false;
  const Json status = pod.value("status", Json::object());
  for (const Json& c : status.value("conditions", Json::array())) {
    if (c.value("type", "") == "Ready") return c.value("status", "") == "True";
  }
  return false;
}

uint64_t ObjectHash(const Json& o) {
  // std::hash of the dump: nlohmann orders object keys, so equal objects dump equally.
  return static_cast<uint64_t>(std::hash<std::string>{}(o.dump()));
}

std::vector<PoolObservation> ObservePools(const ClusterSpec& c, const std::vector<PoolSpec>& pools,
                                          const std::vector<Json>& owned,
                                          const std::vector<Json>& pods, AddressMode mode,
                                          int expert_port) {
  std::map<std::string, const Json*> pod_by_name;
  for (const Json& p : pods) {
    pod_by_name[p.value("metadata", Json::object()).value("name", "")] = &p;
  }
  std::vector<PoolObservation> out;
  for (size_t i = 0; i < pools.size(); ++i) {
    PoolObservation po;
    po.spec = pools[i];
    const std::string sts_name = PoolStatefulSet(c.name, pools[i].name);
    for (const Json& o : owned) {
      if (o.value("kind", "") != "StatefulSet" || o["metadata"].value("name", "") != sts_name) {
        continue;
      }
      po.statefulset_replicas = o.value("spec", Json::object()).value("replicas", 1);
      const int64_t generation = o["metadata"].value("generation", int64_t{0});
      const int64_t observed =
          o.value("status", Json::object()).value("observedGeneration", int64_t{0});
      po.statefulset_current = observed >= generation;
    }
    const int n = std::max(po.spec.replicas, po.statefulset_replicas);
    for (int j = 0; j < n; ++j) {
      WorkerObservation w;
      w.ordinal = j;
      w.id = WorkerId(pools, i, j);
      w.pod = absl::StrCat(sts_name, "-", j);
      auto it = pod_by_name.find(w.pod);
      std::string ip;
      if (it != pod_by_name.end()) {
        w.exists = true;
        w.ready = PodReady(*it->second);
        ip = it->second->value("status", Json::object()).value("podIP", "");
      }
      w.address = w.exists ? PodAddress(mode, sts_name, j, c.ns, ip, expert_port) : "";
      po.workers.push_back(std::move(w));
    }
    out.push_back(std::move(po));
  }
  return out;
}

namespace {

const Json* FindOwned(const std::vector<Json>& owned, const char* kind, const std::string& name) {
  for (const Json& o : owned) {
    if (o.value("kind", "") == kind && o["metadata"].value("name", "") == name) return &o;
  }
  return nullptr;
}

bool Rendered(const std::vector<Json>& rendered, const char* kind, const std::string& name) {
  for (const Json& o : rendered) {
    if (o.value("kind", "") == kind && o["metadata"].value("name", "") == name) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<ReconcileOutput> Reconcile(const ReconcileInput& in) {
  const ClusterSpec& c = in.cluster;
  ReconcileOutput out;
  out.pools = ObservePools(c, in.pools, in.owned, in.pods, in.address_mode, in.expert_port);
  out.plan = PlanPools(out.pools, in.placement);

  std::map<std::string, int> sts_replicas, pool_replicas;
  for (const PoolSpec& p : in.pools) {
    sts_replicas[p.name] = out.plan.pools[p.name].statefulset_replicas;
    pool_replicas[p.name] = p.replicas;
  }
  ASSIGN_OR_RETURN(out.desired, DesiredObjects(c, in.rendered, sts_replicas, pool_replicas));

  std::set<ObjectKey> present;
  for (const Json& o : in.owned) present.insert(KeyOf(o));
  for (const auto& [name, o] : in.expert_pools) present.insert(KeyOf(o));
  for (const Json& d : out.desired) {
    const ObjectKey k = KeyOf(d);
    auto it = in.applied.find(k);
    if (!present.count(k) || it == in.applied.end() || it->second != ObjectHash(d)) {
      out.apply.push_back(d);
    }
  }
  // Orphans: owned objects no longer desired.
  std::vector<Json> owned_all = in.owned;
  for (const auto& [name, o] : in.expert_pools) {
    if (IsControlledBy(o, c.uid)) owned_all.push_back(o);
  }
  for (const ObjectKey& k : Orphans(owned_all, out.desired)) {
    // A removed pool (its ExpertPool and StatefulSet) goes only once the plan is steady: the
    // placement no longer names its workers, the routers drained them.
    if ((k.kind == "StatefulSet" || k.kind == "ExpertPool") && !out.plan.steady()) continue;
    out.remove.push_back(k);
  }

  // Statuses.
  ClusterObservation obs;
  const std::string gw = GatewayDeployment(c.name), rt = RouterStatefulSet(c.name);
  const std::string kv = Fullname(c.name) + "-kv-store";
  const std::string asr = Fullname(c.name) + "-asr", tts = Fullname(c.name) + "-tts";
  obs.gateway =
      RoleOf(FindOwned(in.owned, "Deployment", gw), Rendered(in.rendered, "Deployment", gw));
  obs.routers =
      RoleOf(FindOwned(in.owned, "StatefulSet", rt), Rendered(in.rendered, "StatefulSet", rt));
  obs.kv_store =
      RoleOf(FindOwned(in.owned, "StatefulSet", kv), Rendered(in.rendered, "StatefulSet", kv));
  obs.asr =
      RoleOf(FindOwned(in.owned, "Deployment", asr), Rendered(in.rendered, "Deployment", asr));
  obs.tts =
      RoleOf(FindOwned(in.owned, "Deployment", tts), Rendered(in.rendered, "Deployment", tts));
  obs.pools = out.pools;
  obs.plan = out.plan;
  obs.placement = in.placement;
  obs.balancedness = in.balancedness;
  obs.last_recalibration = in.last_recalibration;
  obs.recalibration_error = in.recalibration_error;
  obs.recalibrating = out.plan.placement_target.has_value();
  if (obs.gateway.wanted) {
    obs.endpoint = absl::StrCat("http://", gw, ".", c.ns, ".svc:", in.gateway_service_port);
  }
  out.cluster_status = ClusterStatus(c, in.cluster_status, obs, in.now);

  for (size_t i = 0; i < out.pools.size(); ++i) {
    const PoolObservation& p = out.pools[i];
    const PoolPlan& pp = out.plan.pools[p.spec.name];
    auto it = in.expert_pools.find(p.spec.object_name);
    const Json old =
        it == in.expert_pools.end() ? Json::object() : it->second.value("status", Json::object());
    const int64_t generation =
        it == in.expert_pools.end()
            ? 0
            : it->second.value("metadata", Json::object()).value("generation", int64_t{0});
    double sum = 0;
    int n = 0;
    std::set<int64_t> resident;
    for (const WorkerObservation& w : p.workers) {
      auto r = in.placement.resident.find(w.id);
      if (r != in.placement.resident.end() && w.ready) {
        resident.insert(r->second.begin(), r->second.end());
      }
      auto u = in.utilisation.find(w.id);
      if (u != in.utilisation.end() && w.ordinal < p.spec.replicas) {
        sum += u->second;
        ++n;
      }
    }
    std::optional<double> util;
    if (n > 0) util = sum / n;
    const std::string selector =
        absl::StrCat("app.kubernetes.io/component=expert-worker,", kClusterLabel, "=", c.name, ",",
                     kPoolLabel, "=", p.spec.name);
    out.pool_status[p.spec.object_name] = PoolStatus(p, pp, old, generation, selector, util,
                                                     static_cast<int>(resident.size()), in.now);
  }
  return out;
}

}  // namespace moe::op
