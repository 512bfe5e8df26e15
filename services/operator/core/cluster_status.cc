#include "services/operator/core/cluster_status.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/operator/core/conditions.h"

namespace moe::op {

RoleObservation RoleOf(const Json* w, bool wanted) {
  RoleObservation r;
  r.wanted = wanted;
  if (w == nullptr || !w->is_object()) return r;
  r.present = true;
  const Json spec = w->value("spec", Json::object());
  const Json status = w->value("status", Json::object());
  r.replicas = spec.contains("replicas") ? spec.value("replicas", 1) : status.value("replicas", 1);
  r.ready = status.value("readyReplicas", 0);
  const int64_t generation = w->value("metadata", Json::object()).value("generation", int64_t{0});
  const int64_t observed = status.value("observedGeneration", int64_t{0});
  const int updated = status.value("updatedReplicas", r.replicas);
  r.rolling = observed < generation || updated < r.replicas;
  return r;
}

namespace {

Json RoleJson(const RoleObservation& r) { return {{"replicas", r.replicas}, {"ready", r.ready}}; }

}  // namespace

Json ClusterStatus(const ClusterSpec& c, const Json& old, const ClusterObservation& o,
                   absl::Time now) {
  Json s = old.is_object() ? old : Json::object();
  s["observedGeneration"] = c.generation;
  const std::pair<const char*, const RoleObservation*> roles[] = {{"gateway", &o.gateway},
                                                                  {"routers", &o.routers},
                                                                  {"kvStore", &o.kv_store},
                                                                  {"asr", &o.asr},
                                                                  {"tts", &o.tts}};
  std::vector<std::string> not_ready, rolling;
  for (const auto& [name, r] : roles) {
    if (!r->wanted) {
      s.erase(name);
      continue;
    }
    s[name] = RoleJson(*r);
    if (!r->present || r->ready < r->replicas) not_ready.push_back(name);
    if (!r->present || r->rolling) rolling.push_back(name);
  }
  int workers = 0, counted = 0;
  std::vector<std::string> pools_moving, pools_degraded;
  for (const PoolObservation& p : o.pools) {
    auto it = o.plan.pools.find(p.spec.name);
    if (it == o.plan.pools.end()) continue;
    workers += p.spec.replicas;
    counted += it->second.counted;
    if (it->second.phase != PoolPhase::kSteady) {
      pools_moving.push_back(absl::StrCat(p.spec.name, ": ", it->second.message));
    }
    for (const WorkerObservation& w : p.workers) {
      const bool placed =
          std::any_of(o.placement.workers.begin(), o.placement.workers.end(),
                      [&](const router::PlacementWorker& pw) { return pw.worker_id == w.id; });
      if (placed && !w.ready) pools_degraded.push_back(w.pod);
    }
  }
  if (!o.pools.empty()) s["expertWorkers"] = {{"replicas", workers}, {"ready", counted}};
  if (counted < workers) not_ready.push_back("expertWorkers");
  if (o.placement.known) s["placementVersion"] = o.placement.version;
  if (o.balancedness.has_value()) s["balancedness"] = std::clamp(*o.balancedness, 0.0, 1.0);
  if (o.last_recalibration.has_value()) s["lastRecalibrationTime"] = Rfc3339(*o.last_recalibration);
  if (!o.endpoint.empty()) s["endpoint"] = o.endpoint;

  Json& conds = s["conditions"];
  const int64_t g = c.generation;
  // Ready: every role's replicas ready, every pool's workers placed, one placement everywhere.
  if (!o.error.empty()) {
    SetCondition(conds, "Ready", false, "ReconcileFailed", o.error, now, g);
  } else if (!not_ready.empty()) {
    SetCondition(conds, "Ready", false, "ReplicasNotReady",
                 "not ready: " + absl::StrJoin(not_ready, ", "), now, g);
  } else if (!o.pools.empty() && !o.placement.known) {
    SetCondition(conds, "Ready", false, "PlacementUnknown", o.placement.error, now, g);
  } else if (!o.pools.empty() && !o.placement.agreed) {
    SetCondition(conds, "Ready", false, "PlacementDiverged",
                 "routers are on different placement versions", now, g);
  } else {
    SetCondition(conds, "Ready", true, "AllReplicasReady", "every role ready, placement agreed",
                 now, g);
  }
  // Progressing: a rollout, or a pool moving through its scaling steps.
  std::vector<std::string> moving = pools_moving;
  for (const std::string& r : rolling) moving.push_back(r + " rolling out");
  if (!moving.empty()) {
    SetCondition(conds, "Progressing", true, pools_moving.empty() ? "RollingOut" : "ScalingPool",
                 absl::StrJoin(moving, "; "), now, g);
  } else {
    SetCondition(conds, "Progressing", false, "Stable", "nothing is changing", now, g);
  }
  // Degraded: a reconcile that failed, a placed worker that is not ready, a failed
  // recalibration.
  if (!o.error.empty()) {
    SetCondition(conds, "Degraded", true, "ReconcileFailed", o.error, now, g);
  } else if (!pools_degraded.empty()) {
    SetCondition(conds, "Degraded", true, "PlacedWorkerNotReady",
                 "placed workers not ready (routers route around them): " +
                     absl::StrJoin(pools_degraded, ", "),
                 now, g);
  } else if (!o.recalibration_error.empty()) {
    SetCondition(conds, "Degraded", true, "RecalibrationFailed", o.recalibration_error, now, g);
  } else {
    SetCondition(conds, "Degraded", false, "AsExpected", "", now, g);
  }
  SetCondition(conds, "Recalibrating", o.recalibrating,
               o.recalibrating ? "PlacementChanging" : "Idle",
               o.recalibrating ? "a recalibration is switching the routers" : "", now, g);
  return s;
}

Json PoolStatus(const PoolObservation& p, const PoolPlan& plan, const Json& old, int64_t generation,
                const std::string& selector, std::optional<double> utilisation,
                int resident_experts, absl::Time now) {
  Json s = old.is_object() ? old : Json::object();
  s["observedGeneration"] = generation;
  s["replicas"] = std::max(0, plan.statefulset_replicas);
  s["readyReplicas"] = plan.counted;
  s["selector"] = selector;
  s["residentExperts"] = resident_experts;
  if (utilisation.has_value()) s["utilisation"] = std::clamp(*utilisation, 0.0, 1.0);
  Json workers = Json::array();
  for (const WorkerObservation& w : p.workers) {
    if (!w.exists) continue;
    workers.push_back({{"name", w.pod}, {"id", w.id}, {"address", w.address}, {"ready", w.ready}});
  }
  s["workers"] = workers;
  Json& conds = s["conditions"];
  const bool available = plan.counted > 0 || p.spec.replicas == 0;
  SetCondition(conds, "Available", available, available ? "WorkersPlaced" : "NoWorkerPlaced",
               absl::StrCat(plan.counted, " of ", p.spec.replicas, " workers ready and placed"),
               now, generation);
  const bool progressing = plan.phase != PoolPhase::kSteady;
  SetCondition(conds, "Progressing", progressing, PoolPhaseName(plan.phase), plan.message, now,
               generation);
  if (plan.placed_not_ready > 0) {
    SetCondition(conds, "Degraded", true, "PlacedWorkerNotReady",
                 absl::StrCat(plan.placed_not_ready, " placed workers not ready"), now, generation);
  } else if (plan.phase == PoolPhase::kWaiting) {
    SetCondition(conds, "Degraded", true, "ObservationIncomplete", plan.message, now, generation);
  } else {
    SetCondition(conds, "Degraded", false, "AsExpected", "", now, generation);
  }
  return s;
}

}  // namespace moe::op
