#include "services/operator/core/chart_values.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "services/operator/core/quantity.h"
#include "services/operator/core/topology.h"

namespace moe::op {
namespace {

using json_read::Get;
using json_read::Obj;

// A quantity field (integer or string) in bytes.
absl::StatusOr<int64_t> Bytes(const Json& j, const char* key, const char* fallback,
                              const std::string& where) {
  auto it = j.is_object() ? j.find(key) : j.end();
  if (it != j.end() && it->is_number_integer()) return it->get<int64_t>();
  const std::string text = it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
  auto q = ParseQuantity(text);
  if (!q.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, key, ": ", q.status().message()));
  return *q;
}

// "2s" -> 2.0 (the chart's seconds values).
absl::StatusOr<double> Seconds(const std::string& text, const std::string& where) {
  auto d = ParseDuration(text);
  if (!d.ok()) return absl::InvalidArgumentError(where + ": " + std::string(d.status().message()));
  return absl::ToDoubleSeconds(*d);
}

Json Hpa(const std::optional<Bounds>& b, bool enabled) {
  if (!enabled || !b.has_value()) return {{"enabled", false}};
  return {{"enabled", true}, {"minReplicas", b->min_replicas}, {"maxReplicas", b->max_replicas}};
}

}  // namespace

Json MergeValues(Json under, const Json& over) {
  if (!under.is_object() || !over.is_object()) return over;
  for (auto it = over.begin(); it != over.end(); ++it) {
    under[it.key()] =
        under.contains(it.key()) ? MergeValues(under[it.key()], it.value()) : it.value();
  }
  return under;
}

absl::StatusOr<Json> ChartValues(const ClusterSpec& c, const std::vector<PoolSpec>& pools,
                                 const Json& base) {
  const Json& s = c.spec;
  Json v = Json::object();
  v["fullnameOverride"] = Fullname(c.name);
  v["operator"] = {{"enabled", false}};

  const Json& image = Obj(s, "image");
  v["image"] = {{"repository", Get<std::string>(image, "repository", "localhost/moe")},
                {"tag", Get<std::string>(image, "tag", "dev")},
                {"pullPolicy", Get<std::string>(image, "pullPolicy", "IfNotPresent")}};

  const Json& model = Obj(s, "model");
  const Json& src = Obj(model, "source");
  Json m = {{"name", c.model_name}, {"maxModelLen", Get<int>(model, "maxModelLen", 0)}};
  if (src.contains("pvc")) {
    m["source"] = "pvc";
    m["pvc"] = {{"claimName", Get<std::string>(src["pvc"], "claimName", "")},
                {"subPath", Get<std::string>(src["pvc"], "subPath", "")}};
  } else if (src.contains("hostPath")) {
    m["source"] = "hostPath";
    m["hostPath"] = {{"path", Get<std::string>(src["hostPath"], "path", "")}};
  } else if (src.contains("image")) {
    m["source"] = "image";
    m["image"] = {{"path", Get<std::string>(src["image"], "path", "")}};
  } else if (src.contains("preset")) {
    m["source"] = "preset";
    m["preset"] = {{"name", Get<std::string>(src["preset"], "name", "small")},
                   {"arch", Get<std::string>(src["preset"], "arch", "mixtral")},
                   {"dtype", Get<std::string>(src["preset"], "dtype", "bf16")}};
  } else {
    return absl::InvalidArgumentError(
        "spec.model.source: exactly one of pvc, hostPath, image, preset");
  }
  v["model"] = m;

  const Json& numerics = Obj(s, "numerics");
  v["numerics"] = {{"device", Get<std::string>(numerics, "device", "cpu")},
                   {"activations", Get<std::string>(numerics, "activations", "f32")},
                   {"weights", Get<std::string>(numerics, "weights", "checkpoint")}};

  const Json& a = Obj(s, "autoscaling");
  const Json& targets = Obj(a, "targets");
  const bool autoscale = c.autoscaling.enabled;

  const Json& g = Obj(s, "gateway");
  v["ports"] = {{"gatewayHttp", Get<int>(g, "port", 8000)}};
  Json gateway = {{"replicas", Get<int>(g, "replicas", 1)},
                  {"config",
                   {{"limits",
                     {{"max_in_flight", Get<int>(g, "maxInFlight", 1024)},
                      {"rate_limit_rps", Get<double>(g, "rateLimitRps", 0)}}}}},
                  {"autoscaling", Hpa(c.autoscaling.gateway, autoscale)}};
  if (g.contains("resources")) gateway["resources"] = g["resources"];
  if (!Get<std::string>(g, "apiKeysSecret", "").empty())
    gateway["apiKeysSecret"] = g["apiKeysSecret"];
  v["gateway"] = gateway;

  const Json& r = Obj(s, "routers");
  ASSIGN_OR_RETURN(int64_t kv_bytes, Bytes(r, "kvCacheBytes", "256Mi", "spec.routers."));
  Json routers = {{"replicas", c.routers},
                  {"gpus", Get<int>(r, "gpus", 0)},
                  {"sidecarExperts", c.sidecar_experts},
                  {"config",
                   {{"core",
                     {{"num_threads", Get<int>(r, "numThreads", 2)},
                      {"kv_cache_bytes", kv_bytes},
                      {"scheduler",
                       {{"max_num_seqs", Get<int>(r, "maxNumSeqs", 256)},
                        {"max_waiting", Get<int>(r, "maxWaiting", 1024)}}}}}}},
                  {"autoscaling", Hpa(c.autoscaling.routers, autoscale)}};
  if (r.contains("resources")) routers["resources"] = r["resources"];
  if (routers["autoscaling"]["enabled"].get<bool>()) {
    routers["autoscaling"]["targetQueueDepth"] = Get<int>(targets, "queueDepth", 16);
    ASSIGN_OR_RETURN(double ttft, Seconds(Get<std::string>(targets, "ttftP99", "2s"),
                                          "spec.autoscaling.targets.ttftP99"));
    routers["autoscaling"]["targetTtftP99Seconds"] = ttft;
  }
  v["routers"] = routers;

  Json expert_pools = Json::array();
  for (const PoolSpec& p : pools) {
    Json e = {{"name", p.name},
              {"replicas", FloorReplicas(p)},
              {"experts", p.experts},
              {"gpus", p.gpus},
              {"resources", p.resources},
              {"config",
               {{"core",
                 {{"threads_per_call", p.threads_per_call},
                  {"max_concurrent_calls", p.max_concurrent_calls},
                  {"max_queued_calls", p.max_queued_calls}}}}}};
    if (!p.node_selector.empty()) e["nodeSelector"] = p.node_selector;
    if (!p.tolerations.empty()) e["tolerations"] = p.tolerations;
    expert_pools.push_back(std::move(e));
  }
  v["expertPools"] = expert_pools;

  const Json& placement = Obj(s, "placement");
  Json pl = {{"policy", c.placement_policy == "Static" ? "static" : "pools"},
             {"utilisationThreshold", Get<double>(placement, "utilisationThreshold", 0.85)}};
  if (c.placement_policy == "Static")
    pl["table"] = Obj(s, "placement").value("table", Json::array());
  v["placement"] = pl;

  const Json& kv = Obj(s, "kvStore");
  Json kv_store = {{"enabled", Get<bool>(kv, "enabled", false)},
                   {"replicas", Get<int>(kv, "replicas", 1)}};
  if (kv_store["enabled"].get<bool>()) {
    ASSIGN_OR_RETURN(int64_t l2, Bytes(kv, "l2Bytes", "1Gi", "spec.kvStore."));
    kv_store["l2Bytes"] = l2;
    const Json& l3 = Obj(kv, "l3");
    Json l3v = {{"size", l3.contains("size") ? l3["size"] : Json("10Gi")}};
    if (!Get<std::string>(l3, "storageClassName", "").empty()) {
      l3v["storageClassName"] = l3["storageClassName"];
    }
    kv_store["l3"] = l3v;
    if (kv.contains("resources")) kv_store["resources"] = kv["resources"];
  }
  v["kvStore"] = kv_store;

  for (const char* role : {"asr", "tts"}) {
    const Json& x = Obj(s, role);
    const auto& bounds = std::string(role) == "asr" ? c.autoscaling.asr : c.autoscaling.tts;
    Json rv = {{"enabled", Get<bool>(x, "enabled", false)},
               {"replicas", Get<int>(x, "replicas", 1)},
               {"autoscaling", Hpa(bounds, autoscale && Get<bool>(x, "enabled", false))}};
    if (x.contains("resources")) rv["resources"] = x["resources"];
    if (std::string(role) == "tts" && targets.contains("ttsFirstChunkP99") &&
        rv["autoscaling"]["enabled"].get<bool>()) {
      ASSIGN_OR_RETURN(double t, Seconds(Get<std::string>(targets, "ttsFirstChunkP99", "0.4s"),
                                         "spec.autoscaling.targets.ttsFirstChunkP99"));
      rv["autoscaling"]["targetFirstChunkP99Seconds"] = t;
    }
    v[role] = rv;
  }

  v["monitoring"] = {{"podMonitor", {{"enabled", false}}},
                     {"serviceMonitor", {{"enabled", false}}},
                     {"prometheusRule", {{"enabled", false}}}};
  // The rule file, the dashboards and the adapter rules select by job and namespace, not by
  // cluster: the operator's own release renders them once per namespace (two copies would fire
  // every alert twice and clash in Grafana). --chart_values may turn them back on.
  const Json namespace_wide = {{"monitoring",
                                {{"rulesConfigMap", {{"enabled", false}}},
                                 {"dashboards", {{"enabled", false}}},
                                 {"prometheusAdapter", {{"rulesConfigMap", false}}}}}};
  return MergeValues(MergeValues(namespace_wide, base.is_object() ? base : Json::object()), v);
}

}  // namespace moe::op
