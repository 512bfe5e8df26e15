#include "services/operator/core/cluster_spec.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "services/operator/core/quantity.h"

namespace moe::op {

const Json& json_read::Obj(const Json& j, const char* key) {
  static const Json kEmpty = Json::object();
  if (!j.is_object()) return kEmpty;
  auto it = j.find(key);
  return it == j.end() || !it->is_object() ? kEmpty : *it;
}

namespace {

using json_read::Get;
using json_read::Obj;

absl::StatusOr<absl::Duration> DurationField(const Json& j, const char* key, const char* fallback,
                                             const std::string& where) {
  auto d = ParseDuration(Get<std::string>(j, key, fallback));
  if (!d.ok())
    return absl::InvalidArgumentError(absl::StrCat(where, key, ": ", d.status().message()));
  return *d;
}

std::optional<Bounds> ParseBounds(const Json& j, const char* key) {
  auto it = j.is_object() ? j.find(key) : j.end();
  if (it == j.end() || !it->is_object()) return std::nullopt;
  Bounds b;
  b.min_replicas = Get<int>(*it, "minReplicas", 1);
  b.max_replicas = Get<int>(*it, "maxReplicas", b.min_replicas);
  return b;
}

absl::Status FillPool(const Json& p, PoolSpec& out, const std::string& where) {
  out.replicas = Get<int>(p, "replicas", 1);
  out.experts = Get<std::vector<std::string>>(p, "experts", {});
  if (out.experts.empty()) return absl::InvalidArgumentError(where + "experts: at least one spec");
  out.autoscaling = ParseBounds(p, "autoscaling");
  out.gpus = Get<int>(p, "gpusPerReplica", 0);
  out.threads_per_call = Get<int>(p, "threadsPerCall", 1);
  out.max_concurrent_calls = Get<int>(p, "maxConcurrentCalls", 1);
  out.max_queued_calls = Get<int>(p, "maxQueuedCalls", 64);
  out.resources = Obj(p, "resources");
  out.node_selector = Obj(p, "nodeSelector");
  out.tolerations =
      p.contains("tolerations") && p["tolerations"].is_array() ? p["tolerations"] : Json::array();
  return absl::OkStatus();
}

}  // namespace

std::string PoolObjectName(const std::string& cluster, const std::string& pool) {
  return absl::StrCat(cluster, "-", pool);
}

absl::StatusOr<ClusterSpec> ParseCluster(const Json& o) {
  ClusterSpec c;
  const Json& meta = Obj(o, "metadata");
  c.name = Get<std::string>(meta, "name", "");
  c.ns = Get<std::string>(meta, "namespace", "default");
  c.uid = Get<std::string>(meta, "uid", "");
  c.generation = Get<int64_t>(meta, "generation", 0);
  c.deleting = meta.contains("deletionTimestamp") && !meta["deletionTimestamp"].is_null();
  c.finalizers = Get<std::vector<std::string>>(meta, "finalizers", {});
  if (c.name.empty()) return absl::InvalidArgumentError("metadata.name is empty");
  c.spec = Obj(o, "spec");
  const Json& s = c.spec;
  c.model_name = Get<std::string>(Obj(s, "model"), "name", "");
  if (c.model_name.empty()) return absl::InvalidArgumentError("spec.model.name is required");
  const Json& routers = Obj(s, "routers");
  c.routers = Get<int>(routers, "replicas", 1);
  c.sidecar_experts = Get<bool>(routers, "sidecarExperts", false);
  if (s.contains("expertPools") && s["expertPools"].is_array()) {
    for (size_t i = 0; i < s["expertPools"].size(); ++i) {
      const Json& p = s["expertPools"][i];
      PoolSpec pool;
      pool.name = Get<std::string>(p, "name", "");
      const std::string where = absl::StrCat("spec.expertPools[", i, "].");
      if (pool.name.empty()) return absl::InvalidArgumentError(where + "name is required");
      pool.object_name = PoolObjectName(c.name, pool.name);
      RETURN_IF_ERROR(FillPool(p, pool, where));
      c.pools.push_back(std::move(pool));
    }
  }
  const Json& placement = Obj(s, "placement");
  c.placement_policy = Get<std::string>(placement, "policy", "RoundRobin");
  c.slots_per_worker = Get<int>(placement, "slotsPerWorker", 0);

  const Json& a = Obj(s, "autoscaling");
  c.autoscaling.enabled = Get<bool>(a, "enabled", false);
  c.autoscaling.expert_utilisation = Get<double>(Obj(a, "targets"), "expertUtilisation", 0.7);
  c.autoscaling.gateway = ParseBounds(a, "gateway");
  c.autoscaling.routers = ParseBounds(a, "routers");
  c.autoscaling.asr = ParseBounds(a, "asr");
  c.autoscaling.tts = ParseBounds(a, "tts");

  const Json& r = Obj(s, "recalibration");
  RecalibrationPolicy& p = c.recalibration;
  const std::string mode = Get<std::string>(r, "mode", "OnDemand");
  using M = RecalibrationPolicy::Mode;
  if (mode == "Off") {
    p.mode = M::kOff;
  } else if (mode == "OnDemand") {
    p.mode = M::kOnDemand;
  } else if (mode == "Threshold") {
    p.mode = M::kThreshold;
  } else if (mode == "Scheduled") {
    p.mode = M::kScheduled;
  } else {
    return absl::InvalidArgumentError("spec.recalibration.mode: unknown mode " + mode);
  }
  const std::string where = "spec.recalibration.";
  ASSIGN_OR_RETURN(p.window, DurationField(r, "window", "300s", where));
  ASSIGN_OR_RETURN(p.interval, DurationField(r, "interval", "30s", where));
  ASSIGN_OR_RETURN(p.cooldown, DurationField(r, "cooldown", "300s", where));
  p.imbalance_threshold = Get<double>(r, "imbalanceThreshold", 0.8);
  p.sustain = Get<int>(r, "sustain", 3);
  p.min_tokens = Get<int64_t>(r, "minTokens", 0);
  p.schedule = Get<std::string>(r, "schedule", "");
  if (p.mode == M::kScheduled && p.schedule.empty()) {
    return absl::InvalidArgumentError("spec.recalibration.schedule is required in mode Scheduled");
  }
  return c;
}

absl::StatusOr<PoolSpec> ParseExpertPool(const Json& o) {
  PoolSpec pool;
  const Json& meta = Obj(o, "metadata");
  pool.object_name = Get<std::string>(meta, "name", "");
  if (pool.object_name.empty()) return absl::InvalidArgumentError("metadata.name is empty");
  const Json& s = Obj(o, "spec");
  const std::string cluster = Get<std::string>(s, "cluster", "");
  if (cluster.empty()) return absl::InvalidArgumentError("spec.cluster is required");
  // An entry's pool is "<cluster>-<pool>"; a standalone one is named for itself.
  const std::string prefix = cluster + "-";
  pool.name = Get<std::string>(Obj(meta, "labels"), "moe-cluster.io/pool", "");
  if (pool.name.empty()) {
    pool.name = pool.object_name.rfind(prefix, 0) == 0 ? pool.object_name.substr(prefix.size())
                                                       : pool.object_name;
  }
  RETURN_IF_ERROR(FillPool(s, pool, "spec."));
  return pool;
}

absl::StatusOr<CalibrationSpec> ParseCalibration(const Json& o) {
  CalibrationSpec c;
  const Json& meta = Obj(o, "metadata");
  c.name = Get<std::string>(meta, "name", "");
  c.ns = Get<std::string>(meta, "namespace", "default");
  c.uid = Get<std::string>(meta, "uid", "");
  c.generation = Get<int64_t>(meta, "generation", 0);
  if (auto t = ParseRfc3339(Get<std::string>(meta, "creationTimestamp", "")); t.ok())
    c.created = *t;
  const Json& s = Obj(o, "spec");
  c.cluster = Get<std::string>(s, "cluster", "");
  if (c.cluster.empty()) return absl::InvalidArgumentError("spec.cluster is required");
  c.scheduled = Get<std::string>(s, "mode", "OneShot") == "Scheduled";
  c.schedule = Get<std::string>(s, "schedule", "");
  if (c.scheduled && c.schedule.empty()) {
    return absl::InvalidArgumentError("spec.schedule is required in mode Scheduled");
  }
  ASSIGN_OR_RETURN(c.window, DurationField(s, "window", "300s", "spec."));
  ASSIGN_OR_RETURN(c.drain_timeout, DurationField(s, "drainTimeout", "30s", "spec."));
  ASSIGN_OR_RETURN(c.timeout, DurationField(s, "timeout", "10m", "spec."));
  c.slots_per_worker = Get<int>(s, "slotsPerWorker", 0);
  if (s.contains("onlyBelowBalancedness") && s["onlyBelowBalancedness"].is_number()) {
    c.only_below_balancedness = s["onlyBelowBalancedness"].get<double>();
  }
  c.dry_run = Get<bool>(s, "dryRun", false);
  return c;
}

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

absl::StatusOr<absl::Time> ParseRfc3339(const std::string& text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    return absl::InvalidArgumentError(absl::StrCat("bad time \"", text, "\": ", err));
  }
  return t;
}

}  // namespace moe::op
