#include "services/operator/core/children.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "services/operator/core/topology.h"

namespace moe::op {

const std::vector<Kind>& OwnedKinds() {
  static const std::vector<Kind> kinds = {
      {"v1", "ServiceAccount", "serviceaccounts"},
      {"v1", "ConfigMap", "configmaps"},
      {"v1", "Service", "services"},
      {"apps/v1", "StatefulSet", "statefulsets"},
      {"apps/v1", "Deployment", "deployments"},
      {"policy/v1", "PodDisruptionBudget", "poddisruptionbudgets"},
      {"networking.k8s.io/v1", "NetworkPolicy", "networkpolicies"},
      {"autoscaling/v2", "HorizontalPodAutoscaler", "horizontalpodautoscalers"},
  };
  return kinds;
}

const Kind* FindKind(const std::string& api_version, const std::string& kind) {
  for (const Kind& k : OwnedKinds()) {
    if (api_version == k.api_version && kind == k.kind) return &k;
  }
  return nullptr;
}

std::string ObjectKey::DebugString() const {
  return absl::StrCat(api_version, " ", kind, " ", ns, "/", name);
}

ObjectKey KeyOf(const Json& o) {
  ObjectKey k;
  k.api_version = o.value("apiVersion", "");
  k.kind = o.value("kind", "");
  if (o.contains("metadata") && o["metadata"].is_object()) {
    k.ns = o["metadata"].value("namespace", "");
    k.name = o["metadata"].value("name", "");
  }
  return k;
}

Json OwnerReference(const ClusterSpec& owner) {
  return {{"apiVersion", kApiVersion}, {"kind", "MoECluster"}, {"name", owner.name},
          {"uid", owner.uid},          {"controller", true},   {"blockOwnerDeletion", true}};
}

bool IsControlledBy(const Json& o, const std::string& uid) {
  if (!o.contains("metadata") || !o["metadata"].contains("ownerReferences")) return false;
  for (const Json& r : o["metadata"]["ownerReferences"]) {
    if (r.value("uid", "") == uid && r.value("controller", false)) return true;
  }
  return false;
}

namespace {

void Label(Json& metadata, const ClusterSpec& c) {
  Json& labels = metadata["labels"];
  if (!labels.is_object()) labels = Json::object();
  labels[kManagedByLabel] = kManagedBy;
  labels[kClusterLabel] = c.name;
}

void Own(Json& o, const ClusterSpec& c) {
  Json& meta = o["metadata"];
  meta["namespace"] = c.ns;
  meta["ownerReferences"] = Json::array({OwnerReference(c)});
  Label(meta, c);
}

}  // namespace

Json ExpertPoolObject(const ClusterSpec& c, const PoolSpec& p, int replicas) {
  Json spec = {{"cluster", c.name},
               {"replicas", replicas},
               {"experts", p.experts},
               {"gpusPerReplica", p.gpus},
               {"threadsPerCall", p.threads_per_call},
               {"maxConcurrentCalls", p.max_concurrent_calls},
               {"maxQueuedCalls", p.max_queued_calls}};
  if (!p.resources.empty()) spec["resources"] = p.resources;
  if (!p.node_selector.empty()) spec["nodeSelector"] = p.node_selector;
  if (!p.tolerations.empty()) spec["tolerations"] = p.tolerations;
  if (p.autoscaling.has_value()) {
    spec["autoscaling"] = {{"minReplicas", p.autoscaling->min_replicas},
                           {"maxReplicas", p.autoscaling->max_replicas}};
  }
  Json o = {{"apiVersion", kApiVersion},
            {"kind", "ExpertPool"},
            {"metadata", {{"name", p.object_name}, {"labels", {{kPoolLabel, p.name}}}}},
            {"spec", spec}};
  Own(o, c);
  return o;
}

absl::StatusOr<std::vector<Json>> DesiredObjects(
    const ClusterSpec& c, const std::vector<Json>& rendered,
    const std::map<std::string, int>& statefulset_replicas,
    const std::map<std::string, int>& pool_replicas) {
  std::vector<Json> out;
  for (const PoolSpec& p : c.pools) {
    auto it = pool_replicas.find(p.name);
    out.push_back(ExpertPoolObject(c, p, it == pool_replicas.end() ? p.replicas : it->second));
  }
  std::vector<Json> objects;
  for (const Json& r : rendered) {
    const ObjectKey key = KeyOf(r);
    if (key.name.empty()) return absl::InvalidArgumentError("a rendered object has no name");
    if (FindKind(key.api_version, key.kind) == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the chart rendered ", key.api_version, " ",
                                                     key.kind, " ", key.name,
                                                     ", a kind the operator does not manage"));
    }
    Json o = r;
    Own(o, c);
    if (o.contains("spec") && o["spec"].contains("template") &&
        o["spec"]["template"].contains("metadata")) {
      Label(o["spec"]["template"]["metadata"], c);
    }
    if (key.kind == "StatefulSet") {
      const Json& labels = o["metadata"]["labels"];
      if (labels.contains(kPoolLabel)) {
        auto it = statefulset_replicas.find(labels[kPoolLabel].get<std::string>());
        if (it != statefulset_replicas.end()) o["spec"]["replicas"] = it->second;
      }
    }
    objects.push_back(std::move(o));
  }
  // Apply order: configuration first, then what mounts or selects it.
  for (const Kind& k : OwnedKinds()) {
    for (const Json& o : objects) {
      if (o.value("kind", "") == k.kind && o.value("apiVersion", "") == k.api_version) {
        out.push_back(o);
      }
    }
  }
  return out;
}

std::vector<ObjectKey> Orphans(const std::vector<Json>& owned, const std::vector<Json>& desired) {
  std::set<ObjectKey> want;
  for (const Json& d : desired) want.insert(KeyOf(d));
  std::vector<ObjectKey> out;
  for (const Json& o : owned) {
    const ObjectKey k = KeyOf(o);
    if (!want.count(k)) out.push_back(k);
  }
  return out;
}

}  // namespace moe::op
