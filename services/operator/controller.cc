#include "services/operator/controller.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "common/base/log.h"
#include "services/operator/core/calibration.h"
#include "services/operator/core/chart_values.h"
#include "services/operator/core/children.h"
#include "services/operator/core/cluster_spec.h"
#include "services/operator/core/conditions.h"
#include "services/operator/core/cron.h"
#include "services/operator/core/placement_change.h"
#include "services/operator/core/reconcile.h"
#include "services/router/core/recalibration_coordinator.h"

namespace moe::op {
namespace {

using Json = nlohmann::json;

const kube::Resource kClusters{kApiVersion, "moeclusters", true};
const kube::Resource kPools{kApiVersion, "expertpools", true};
const kube::Resource kCalibrations{kApiVersion, "routercalibrations", true};
const kube::Resource kPods{"v1", "pods", true};
const kube::Resource kEvents{"v1", "events", true};

kube::Resource ResourceOf(const Kind& k) { return {k.api_version, k.resource, true}; }

kube::Resource ResourceFor(const ObjectKey& key) {
  if (key.kind == "ExpertPool") return kPools;
  const Kind* k = FindKind(key.api_version, key.kind);
  return k != nullptr ? ResourceOf(*k) : kube::Resource{key.api_version, "", true};
}

const Json& Meta(const Json& o) {
  static const Json kEmpty = Json::object();
  auto it = o.find("metadata");
  return it == o.end() || !it->is_object() ? kEmpty : *it;
}
std::string Name(const Json& o) { return Meta(o).value("name", ""); }
std::string Namespace(const Json& o) { return Meta(o).value("namespace", ""); }

int IntValue(const Json& values, const char* section, const char* key, int fallback) {
  if (!values.contains(section) || !values[section].is_object()) return fallback;
  return values[section].value(key, fallback);
}

}  // namespace

struct Controller::Metrics {
  explicit Metrics(common::metrics::Registry& r)
      : reconciles(r.CounterFamily("moe_operator_reconciles_total",
                                   "MoECluster reconciles by result (ok, error, deleted).")),
        reconcile_seconds(r.AddHistogram("moe_operator_reconcile_seconds",
                                         "One MoECluster reconcile, seconds.",
                                         common::metrics::LatencyBuckets())),
        applies(r.CounterFamily("moe_operator_applies_total", "Objects applied, by kind.")),
        deletes(r.CounterFamily("moe_operator_deletes_total", "Objects deleted, by kind.")),
        scale_decisions(r.CounterFamily("moe_operator_scale_decisions_total",
                                        "Expert-pool autoscaler decisions that changed the "
                                        "desired replicas, by direction (up, down).")),
        placement_changes(r.CounterFamily(
            "moe_operator_placement_changes_total",
            "Placement switches onto or away from expert workers (scaling), by result.")),
        recalibrations(r.CounterFamily(
            "moe_operator_recalibrations_total",
            "Recalibrations run, by trigger (calibration, threshold, schedule) and result.")),
        pool_replicas(r.GaugeFamily("moe_operator_pool_replicas",
                                    "Expert-pool workers by state (desired, counted: ready "
                                    "and placed).")) {
    // Every result at 0 from the start, so that a rule's increase() sees the first failure.
    for (const char* result : {"ok", "error", "deleted"}) reconciles.Add({{"result", result}});
    for (const char* result : {"ok", "failed"}) {
      placement_changes.Add({{"result", result}});
      for (const char* trigger : {"calibration", "threshold", "schedule"}) {
        recalibrations.Add({{"trigger", trigger}, {"result", result}});
      }
    }
  }
  common::metrics::Family<common::metrics::Counter>& reconciles;
  common::metrics::Histogram& reconcile_seconds;
  common::metrics::Family<common::metrics::Counter>& applies;
  common::metrics::Family<common::metrics::Counter>& deletes;
  common::metrics::Family<common::metrics::Counter>& scale_decisions;
  common::metrics::Family<common::metrics::Counter>& placement_changes;
  common::metrics::Family<common::metrics::Counter>& recalibrations;
  common::metrics::Family<common::metrics::Gauge>& pool_replicas;
};

// What the operator remembers about a cluster between reconciles. Only the worker holding the
// cluster's key touches it.
struct Controller::ClusterState {
  std::map<ObjectKey, uint64_t> applied;               // hashes of what was applied
  std::map<std::string, AutoscalerState> autoscalers;  // by pool
  std::map<std::string, int> desired;                  // the autoscaler's replicas, by pool
  absl::Time next_pool_check = absl::InfinitePast();
  std::vector<std::string> routers;  // the transport's
  std::unique_ptr<router::RecalibrationTransport> transport;
  std::unique_ptr<router::RecalibrationCoordinator> coordinator;
  std::string coordinator_options;  // what the coordinator was made with
  std::optional<absl::Time> next_scheduled;
  std::optional<absl::Time> last_recalibration;
  std::string recalibration_error;
  std::optional<double> balancedness;
  std::string last_error;  // the last reconcile's, for events once per change
};

Controller::Controller(ControllerOptions options, kube::KubeClient& client, ChartRenderer& renderer,
                       MetricsSource& metrics, TransportFactory& transports, common::Clock& clock,
                       common::metrics::Registry& registry)
    : options_(std::move(options)),
      client_(client),
      renderer_(renderer),
      metrics_source_(metrics),
      transports_(transports),
      clock_(clock),
      registry_(registry),
      metrics_(std::make_unique<Metrics>(registry)) {
  auto add = [&](const kube::Resource& r, const std::string& selector) {
    informers_[r.plural] = std::make_unique<kube::Informer>(
        kube::InformerOptions{.resource = r, .ns = options_.ns, .label_selector = selector},
        client_, clock_, registry_,
        [this, plural = r.plural](kube::Informer::Change, const Json& o) { Enqueue(o, plural); });
  };
  add(kClusters, "");
  add(kPools, "");
  add(kCalibrations, "");
  add(kPods, kClusterLabel);
  for (const Kind& k : OwnedKinds()) {
    add(ResourceOf(k), absl::StrCat(kManagedByLabel, "=", kManagedBy));
  }
}

Controller::~Controller() { Stop(); }

kube::Informer& Controller::informer(const std::string& plural) const {
  return *informers_.at(plural);
}

void Controller::Start() {
  for (auto& [plural, inf] : informers_) inf->Start();
  for (int i = 0; i < std::max(1, options_.workers); ++i) {
    workers_.emplace_back([this] { Worker(); });
  }
}

void Controller::Stop() {
  if (stopped_.exchange(true)) return;
  queue_.ShutDown();
  client_.CancelWatches();
  for (auto& [plural, inf] : informers_) inf->Stop();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

bool Controller::Synced() const {
  for (const auto& [plural, inf] : informers_) {
    if (!inf->HasSynced()) return false;
  }
  return true;
}

void Controller::SetLeading(bool leading) {
  const bool was = leading_.exchange(leading);
  if (leading && !was) {
    for (const Json& c : informer("moeclusters").List()) Enqueue(c, "moeclusters");
  }
}

void Controller::Enqueue(const Json& o, const std::string& resource) {
  std::string cluster;
  if (resource == "moeclusters") {
    cluster = Name(o);
  } else if (resource == "expertpools" || resource == "routercalibrations") {
    cluster = o.value("spec", Json::object()).value("cluster", "");
  } else {
    cluster = Meta(o).value("labels", Json::object()).value(kClusterLabel, "");
  }
  if (!cluster.empty()) queue_.Add(absl::StrCat(Namespace(o), "/", cluster));
}

void Controller::Worker() {
  while (auto key = queue_.Get()) {
    if (!leading_) {
      // Not ours to act on; a new leader enqueues every cluster.
      queue_.Done(*key);
      queue_.AddAfter(*key, absl::Seconds(1));
      continue;
    }
    const absl::Time start = clock_.Now();
    const absl::Duration again = Reconcile(*key);
    metrics_->reconcile_seconds.Observe(absl::ToDoubleSeconds(clock_.Now() - start));
    queue_.Done(*key);
    if (again < absl::InfiniteDuration()) queue_.AddAfter(*key, again);
  }
}

void Controller::Event(const Json& involved, const std::string& type, const std::string& reason,
                       const std::string& message) {
  if (!leading_) return;
  const absl::Time now = clock_.Now();
  const std::string ts = Rfc3339(now);
  Json ev = {{"apiVersion", "v1"},
             {"kind", "Event"},
             {"metadata",
              {{"name", absl::StrCat(Name(involved), ".", absl::Hex(absl::ToUnixNanos(now)))},
               {"namespace", Namespace(involved)}}},
             {"involvedObject",
              {{"apiVersion", involved.value("apiVersion", "")},
               {"kind", involved.value("kind", "")},
               {"name", Name(involved)},
               {"namespace", Namespace(involved)},
               {"uid", Meta(involved).value("uid", "")}}},
             {"reason", reason},
             {"message", message.substr(0, 1024)},
             {"type", type},
             {"source", {{"component", "moe-operator"}}},
             {"reportingComponent", "moe-operator"},
             {"reportingInstance", options_.identity},
             {"firstTimestamp", ts},
             {"lastTimestamp", ts},
             {"count", 1}};
  if (auto s = client_.Create(kEvents, Namespace(involved), ev); !s.ok()) {
    MOE_LOG_WARN("operator: event {} on {}: {}", reason, Name(involved), s.status().ToString());
  }
  MOE_LOG_INFO("operator: {} {}/{}: {}: {}", involved.value("kind", ""), Namespace(involved),
               Name(involved), reason, message);
}

absl::Status Controller::WriteStatus(const kube::Resource& r, const Json& object,
                                     const Json& status) {
  if (!leading_) return absl::FailedPreconditionError("not leading");
  if (object.value("status", Json::object()) == status) return absl::OkStatus();
  Json patch = {{"apiVersion", object.value("apiVersion", "")},
                {"kind", object.value("kind", "")},
                {"metadata", {{"name", Name(object)}, {"namespace", Namespace(object)}}},
                {"status", status}};
  return client_
      .Apply(r, Namespace(object), patch,
             {.field_manager = options_.field_manager, .force = true, .subresource = "status"})
      .status();
}

absl::Duration Controller::Reconcile(const std::string& key) {
  const size_t slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  auto object = informer("moeclusters").Get(ns, name);
  ClusterState* state;
  {
    absl::MutexLock lock(&mu_);
    if (!object.has_value()) {
      states_.erase(key);
      return absl::InfiniteDuration();
    }
    auto& s = states_[key];
    if (!s) s = std::make_unique<ClusterState>();
    state = s.get();
  }
  if (Meta(*object).contains("deletionTimestamp")) {
    Finalize(*object, *state);
    metrics_->reconciles.Add({{"result", "deleted"}}).Increment();
    return absl::Seconds(1);
  }
  return ReconcileLive(*object, *state);
}

void Controller::Finalize(const Json& object, ClusterState& state) {
  const std::string uid = Meta(object).value("uid", "");
  const std::string ns = Namespace(object);
  // Delete what the cluster owns (the garbage collector would; doing it here orders it and
  // needs no GC), then let the object go.
  int left = 0;
  std::vector<std::pair<kube::Resource, Json>> owned;
  for (const Json& p : informer("expertpools").List()) owned.emplace_back(kPools, p);
  for (const Kind& k : OwnedKinds()) {
    for (const Json& o : informer(k.resource).List()) owned.emplace_back(ResourceOf(k), o);
  }
  for (const auto& [r, o] : owned) {
    if (Namespace(o) != ns || !IsControlledBy(o, uid)) continue;
    ++left;
    if (Meta(o).contains("deletionTimestamp")) continue;
    if (auto s = client_.Delete(r, ns, Name(o));
        !s.ok() && s.code() != absl::StatusCode::kNotFound) {
      MOE_LOG_WARN("operator: delete {} {}: {}", r.plural, Name(o), s.ToString());
    }
  }
  state.transport.reset();
  state.coordinator.reset();
  if (left > 0) return;
  std::vector<std::string> finalizers =
      Meta(object).value("finalizers", std::vector<std::string>{});
  if (std::find(finalizers.begin(), finalizers.end(), kFinalizer) == finalizers.end()) return;
  finalizers.erase(std::remove(finalizers.begin(), finalizers.end(), kFinalizer), finalizers.end());
  Json updated = object;
  updated["metadata"]["finalizers"] = finalizers;
  if (auto s = client_.Update(kClusters, ns, updated); !s.ok()) {
    MOE_LOG_INFO("operator: removing the finalizer of {}: {}", Name(object), s.status().ToString());
  }
}

namespace {

// The cluster's pools in id order: its entries (replicas: the autoscaler's when it decided,
// else the ExpertPool's, else the entry's), then standalone ExpertPools naming it.
std::vector<PoolSpec> EffectivePools(const ClusterSpec& c, const std::vector<Json>& expert_pools,
                                     const std::map<std::string, int>& desired,
                                     std::map<std::string, Json>& pool_objects) {
  std::vector<PoolSpec> pools = c.pools;
  for (const Json& o : expert_pools) {
    if (Namespace(o) != c.ns || o.value("spec", Json::object()).value("cluster", "") != c.name) {
      continue;
    }
    pool_objects[Name(o)] = o;
  }
  for (PoolSpec& p : pools) {
    if (!p.autoscaling.has_value()) continue;
    const Bounds b{std::max(1, p.autoscaling->min_replicas), p.autoscaling->max_replicas};
    int replicas = p.replicas;
    if (auto it = pool_objects.find(p.object_name); it != pool_objects.end()) {
      replicas = it->second["spec"].value("replicas", replicas);
    }
    if (auto it = desired.find(p.name); it != desired.end()) replicas = it->second;
    p.replicas = std::clamp(replicas, b.min_replicas, std::max(b.min_replicas, b.max_replicas));
  }
  std::vector<PoolSpec> standalone;
  for (const auto& [name, o] : pool_objects) {
    if (IsControlledBy(o, c.uid)) continue;
    auto p = ParseExpertPool(o);
    if (!p.ok()) continue;
    p->standalone = true;
    if (auto it = desired.find(p->name); it != desired.end()) p->replicas = it->second;
    standalone.push_back(*std::move(p));
  }
  for (PoolSpec& p : standalone) pools.push_back(std::move(p));
  return pools;
}

}  // namespace

absl::Duration Controller::ReconcileLive(const Json& object, ClusterState& state) {
  const absl::Time now = clock_.Now();
  auto parsed = ParseCluster(object);
  if (!parsed.ok()) {
    Json status = object.value("status", Json::object());
    SetCondition(status["conditions"], "Ready", false, "InvalidSpec",
                 std::string(parsed.status().message()), now, Meta(object).value("generation", 0));
    (void)WriteStatus(kClusters, object, status);
    if (state.last_error != parsed.status().ToString()) {
      state.last_error = parsed.status().ToString();
      Event(object, "Warning", "InvalidSpec", std::string(parsed.status().message()));
    }
    metrics_->reconciles.Add({{"result", "error"}}).Increment();
    return options_.resync;
  }
  const ClusterSpec& c = *parsed;
  // 1. The finalizer: the operator cleans up before the object goes.
  if (std::find(c.finalizers.begin(), c.finalizers.end(), kFinalizer) == c.finalizers.end()) {
    Json updated = object;
    updated["metadata"]["finalizers"].push_back(kFinalizer);
    auto s = client_.Update(kClusters, c.ns, updated);
    if (!s.ok()) {
      // 409: the cache was behind; the watch brings the new version and another reconcile.
      MOE_LOG_INFO("operator: finalizer on {}: {}", c.name, s.status().ToString());
      return absl::Milliseconds(200);
    }
  }

  std::map<std::string, Json> pool_objects;
  std::vector<PoolSpec> pools =
      EffectivePools(c, informer("expertpools").List(), state.desired, pool_objects);

  // Observed children and pods of this cluster.
  std::vector<Json> owned, pods;
  for (const Kind& k : OwnedKinds()) {
    for (const Json& o : informer(k.resource).List()) {
      if (Namespace(o) == c.ns && IsControlledBy(o, c.uid)) owned.push_back(o);
    }
  }
  for (const Json& p : informer("pods").List()) {
    if (Namespace(p) == c.ns &&
        Meta(p).value("labels", Json::object()).value(kClusterLabel, "") == c.name) {
      pods.push_back(p);
    }
  }

  // 2. Values and the chart's objects.
  std::string error;
  auto values = ChartValues(c, pools, options_.chart_values);
  std::vector<Json> rendered;
  if (!values.ok()) {
    error = absl::StrCat("values: ", values.status().message());
  } else if (auto r = renderer_.Render(c.name, c.ns, *values); !r.ok()) {
    error = absl::StrCat("render: ", r.status().message());
  } else {
    rendered = *std::move(r);
  }
  const Json v = values.ok() ? *values : Json::object();
  const int router_port = IntValue(v, "ports", "routerGrpc", 50051);
  const int expert_port = IntValue(v, "ports", "expertGrpc", 50052);

  // 3. The routers and their placement.
  const std::string router_sts = RouterStatefulSet(c.name);
  std::vector<std::string> routers;
  for (int i = 0; i < c.routers; ++i) {
    for (const Json& p : pods) {
      if (Name(p) != absl::StrCat(router_sts, "-", i) || !PodReady(p)) continue;
      const std::string address =
          PodAddress(options_.address_mode, router_sts, i, c.ns,
                     p.value("status", Json::object()).value("podIP", ""), router_port);
      if (!address.empty()) routers.push_back(address);
    }
  }
  PlacementObservation placement;
  std::vector<router::RouterLoadReport> reports;
  if (routers.size() != static_cast<size_t>(c.routers) || routers.empty()) {
    placement.error = absl::StrCat(routers.size(), " of ", c.routers, " routers ready");
  } else {
    if (routers != state.routers || state.transport == nullptr) {
      auto t = transports_.Make(routers, options_.rpc_timeout);
      state.routers = routers;
      state.coordinator.reset();
      state.transport = t.ok() ? *std::move(t) : nullptr;
      if (!t.ok()) placement.error = std::string(t.status().message());
    }
    if (state.transport != nullptr) {
      placement.known = true;
      for (int i = 0; i < state.transport->num_routers(); ++i) {
        auto r = state.transport->GetStats(i, options_.stats_window);
        if (!r.ok()) {
          placement.known = false;
          placement.error = std::string(r.status().message());
          break;
        }
        reports.push_back(*std::move(r));
      }
    }
    if (placement.known) {
      const router::PlacementTable* newest = &reports[0].placement;
      for (const auto& r : reports) {
        if (r.placement.version > newest->version) newest = &r.placement;
      }
      placement.version = newest->version;
      placement.workers = newest->workers;
      for (const auto& [id, keys] : newest->ExpertsByWorker()) {
        for (const auto& k : keys) {
          placement.resident[id].insert(k.layer * newest->num_experts + k.expert);
        }
      }
      auto load = router::AggregateLoad(reports);
      placement.agreed = load.ok();
      if (load.ok()) state.balancedness = SnapshotOf(*load).balancedness;
    }
  }

  // 4. Utilisation (Prometheus) and the autoscaler, for steady autoscaled pools.
  std::map<int32_t, double> utilisation;
  const bool pool_check = now >= state.next_pool_check;
  if (pool_check) state.next_pool_check = now + options_.pool_interval;
  bool any_autoscaled = false;
  for (const PoolSpec& p : pools) any_autoscaled = any_autoscaled || p.autoscaling.has_value();
  if (pool_check && any_autoscaled && c.autoscaling.enabled && !c.sidecar_experts) {
    const std::string q = absl::StrReplaceAll(options_.utilisation_query,
                                              {{"$namespace", c.ns}, {"$routers", router_sts}});
    auto samples = metrics_source_.Query(q);
    if (!samples.ok()) {
      MOE_LOG_WARN("operator: {}: utilisation: {}", c.name, samples.status().ToString());
    } else {
      for (const Sample& s : *samples) {
        int32_t id;
        auto it = s.labels.find("worker");
        if (it != s.labels.end() && absl::SimpleAtoi(it->second, &id)) utilisation[id] = s.value;
      }
    }
    const auto observed = ObservePools(c, pools, owned, pods, options_.address_mode, expert_port);
    const ClusterPlan plan = PlanPools(observed, placement);
    for (size_t i = 0; i < pools.size(); ++i) {
      PoolSpec& p = pools[i];
      if (!p.autoscaling.has_value() || !samples.ok()) continue;
      auto pp = plan.pools.find(p.name);
      if (pp == plan.pools.end() || pp->second.phase != PoolPhase::kSteady) continue;
      // The pool's utilisation: mean over its placed, wanted workers.
      double sum = 0;
      int n = 0;
      for (const WorkerObservation& w : observed[i].workers) {
        auto u = utilisation.find(w.id);
        if (w.ordinal < p.replicas && u != utilisation.end()) {
          sum += u->second;
          ++n;
        }
      }
      std::optional<double> util;
      if (n > 0) util = sum / n;
      const Bounds b{std::max(1, p.autoscaling->min_replicas),
                     std::max(1, p.autoscaling->max_replicas)};
      const ScaleDecision d = Recommend(options_.autoscaler, state.autoscalers[p.name], now,
                                        p.replicas, util, c.autoscaling.expert_utilisation, b);
      if (d.replicas != p.replicas) {
        metrics_->scale_decisions.Add({{"direction", d.replicas > p.replicas ? "up" : "down"}})
            .Increment();
        Event(object, "Normal", d.reason == "ScaleUp" ? "ScalingUp" : "ScalingDown",
              absl::StrCat("expert pool ", p.name, ": ", p.replicas, " -> ", d.replicas,
                           " workers (utilisation ", util.value_or(0), ", target ",
                           c.autoscaling.expert_utilisation, ")"));
        p.replicas = d.replicas;
      }
      state.desired[p.name] = p.replicas;
    }
    if (values.ok()) values = ChartValues(c, pools, options_.chart_values);
  }

  // 5. The pure reconcile.
  ReconcileInput in;
  in.cluster = c;
  in.cluster_status = object.value("status", Json::object());
  in.pools = pools;
  in.expert_pools = pool_objects;
  in.rendered = rendered;
  in.owned = owned;
  in.pods = pods;
  in.placement = placement;
  in.utilisation = utilisation;
  in.balancedness = state.balancedness;
  in.last_recalibration = state.last_recalibration;
  in.recalibration_error = state.recalibration_error;
  in.applied = state.applied;
  in.address_mode = options_.address_mode;
  in.expert_port = expert_port;
  in.gateway_service_port = v.contains("gateway") && v["gateway"].contains("service")
                                ? v["gateway"]["service"].value("port", 80)
                                : 80;
  in.now = now;
  absl::StatusOr<ReconcileOutput> out;
  if (error.empty()) {
    out = op::Reconcile(in);
    if (!out.ok()) error = std::string(out.status().message());
  }
  if (!error.empty()) {
    // Keep the status true about what is wrong; touch nothing else.
    in.rendered.clear();
    ClusterObservation obs;
    obs.error = error;
    obs.placement = placement;
    Json status = ClusterStatus(c, in.cluster_status, obs, now);
    (void)WriteStatus(kClusters, object, status);
    if (state.last_error != error) {
      state.last_error = error;
      Event(object, "Warning", "ReconcileFailed", error);
    }
    metrics_->reconciles.Add({{"result", "error"}}).Increment();
    return std::min(options_.resync, absl::Seconds(10));
  }

  // 6. Apply, then delete orphans.
  std::vector<std::string> apply_errors;
  for (const Json& o : out->apply) {
    if (!leading_) return absl::Seconds(1);
    const ObjectKey k = KeyOf(o);
    auto s = client_.Apply(ResourceFor(k), c.ns, o, {.field_manager = options_.field_manager});
    if (!s.ok()) {
      apply_errors.push_back(absl::StrCat(k.kind, " ", k.name, ": ", s.status().message()));
      continue;
    }
    state.applied[k] = ObjectHash(o);
    metrics_->applies.Add({{"kind", k.kind}}).Increment();
  }
  for (const ObjectKey& k : out->remove) {
    if (!leading_) return absl::Seconds(1);
    auto s = client_.Delete(ResourceFor(k), c.ns, k.name);
    if (s.ok() || s.code() == absl::StatusCode::kNotFound) {
      state.applied.erase(k);
      metrics_->deletes.Add({{"kind", k.kind}}).Increment();
      Event(object, "Normal", "Deleted", absl::StrCat(k.kind, " ", k.name, " is no longer wanted"));
    }
  }

  // 7. A placement change for scaling.
  bool placement_changed = false;
  if (out->plan.placement_target.has_value() && state.transport != nullptr && leading_) {
    std::vector<router::RouterLoadReport> fresh;
    absl::Status s;
    for (int i = 0; i < state.transport->num_routers() && s.ok(); ++i) {
      auto r = state.transport->GetStats(i, options_.stats_window);
      if (r.ok())
        fresh.push_back(*std::move(r));
      else
        s = r.status();
    }
    int converged = 0;
    if (s.ok()) {
      auto n = router::CompleteInterruptedSwitch(*state.transport, fresh);
      if (n.ok())
        converged = *n;
      else
        s = n.status();
    }
    absl::StatusOr<router::ClusterLoad> load =
        s.ok() ? router::AggregateLoad(fresh) : absl::StatusOr<router::ClusterLoad>(s);
    absl::StatusOr<router::RecalibrationReport> plan =
        load.ok() ? PlanPlacementChange(*load, *out->plan.placement_target, c.slots_per_worker)
                  : absl::StatusOr<router::RecalibrationReport>(load.status());
    if (plan.ok()) {
      s = router::ApplyRecalibration(*state.transport, load->placement, plan->placement);
    } else {
      s = plan.status();
    }
    metrics_->placement_changes.Add({{"result", s.ok() ? "ok" : "failed"}}).Increment();
    if (s.ok()) {
      placement_changed = true;
      state.last_recalibration = clock_.Now();
      state.recalibration_error.clear();
      std::vector<std::string> ids;
      for (const auto& w : *out->plan.placement_target) ids.push_back(absl::StrCat(w.worker_id));
      Event(object, "Normal", "PlacementChanged",
            absl::StrCat(
                "placement v", plan->previous_version, " -> v", plan->version, " over ", ids.size(),
                " workers [", absl::StrJoin(ids, ","), "]: ", plan->experts_loaded,
                " replicas loaded, ", plan->experts_unloaded, " unloaded",
                converged > 0 ? absl::StrCat(", ", converged, " routers converged first") : ""));
    } else {
      state.recalibration_error = absl::StrCat("placement change: ", s.message());
      Event(object, "Warning", "PlacementChangeFailed", state.recalibration_error);
    }
  }

  // 8. Recalibrations, only on a steady cluster (scaling owns the placement meanwhile).
  const bool steady = out->plan.steady() && placement.known && placement.agreed &&
                      state.transport != nullptr && !placement_changed;
  absl::Duration again = options_.resync;
  if (!out->plan.steady() || placement_changed || !placement.known) {
    again = std::min(again, options_.pool_interval / 5);
  }
  if (any_autoscaled && c.autoscaling.enabled) {
    again = std::min(again, std::max(absl::Milliseconds(10), state.next_pool_check - now));
  }
  auto record = [&](const char* trigger, const absl::Status& s) {
    metrics_->recalibrations.Add({{"trigger", trigger}, {"result", s.ok() ? "ok" : "failed"}})
        .Increment();
    if (s.ok()) {
      state.last_recalibration = clock_.Now();
      state.recalibration_error.clear();
    } else {
      state.recalibration_error = std::string(s.message());
    }
  };
  if (steady && leading_) {
    // RouterCalibration objects of this cluster.
    for (const Json& rc : informer("routercalibrations").List()) {
      if (Namespace(rc) != c.ns) continue;
      auto spec = ParseCalibration(rc);
      if (!spec.ok() || spec->cluster != c.name) continue;
      const Json old = rc.value("status", Json::object());
      auto due = IsCalibrationDue(*spec, old, clock_.Now());
      if (!due.ok()) {
        Json st = old;
        SetCondition(st["conditions"], "Failed", true, "InvalidSchedule",
                     std::string(due.status().message()), clock_.Now(), spec->generation);
        (void)WriteStatus(kCalibrations, rc, st);
        continue;
      }
      if (!due->run) {
        if (spec->scheduled && due->next.has_value()) {
          Json st = old;
          st["nextScheduleTime"] = Rfc3339(*due->next);
          (void)WriteStatus(kCalibrations, rc, st);
          again = std::min(again, std::max(absl::Seconds(1), *due->next - clock_.Now()));
        }
        continue;
      }
      const absl::Time start = clock_.Now();
      Json running = old;
      running["phase"] = "Running";
      running["startTime"] = Rfc3339(start);
      (void)WriteStatus(kCalibrations, rc, running);
      auto transport = transports_.Make(
          state.routers, std::min(spec->timeout, spec->drain_timeout + absl::Seconds(10)));
      CalibrationResult result;
      result.routers = state.routers;
      std::vector<router::RouterLoadReport> before;
      absl::Status s = transport.status();
      for (int i = 0; s.ok() && i < (*transport)->num_routers(); ++i) {
        auto r = (*transport)->GetStats(i, spec->window);
        if (r.ok())
          before.push_back(*std::move(r));
        else
          s = r.status();
      }
      absl::StatusOr<router::ClusterLoad> load =
          s.ok() ? router::AggregateLoad(before) : absl::StatusOr<router::ClusterLoad>(s);
      if (load.ok()) result.before = SnapshotOf(*load);
      if (!load.ok()) {
        result.phase = CalibrationResult::Phase::kFailed;
        result.message = std::string(load.status().message());
      } else if (spec->only_below_balancedness.has_value() &&
                 result.before->balancedness >= *spec->only_below_balancedness) {
        result.phase = CalibrationResult::Phase::kSkipped;
        result.message = absl::StrCat("balancedness ", result.before->balancedness,
                                      " >= ", *spec->only_below_balancedness);
      } else {
        auto report = router::Recalibrate(**transport, {.window = spec->window,
                                                        .slots_per_worker = spec->slots_per_worker,
                                                        .dry_run = spec->dry_run});
        if (!report.ok()) {
          result.phase = CalibrationResult::Phase::kFailed;
          result.message = std::string(report.status().message());
        } else {
          result.report = *report;
          LoadSnapshot after;
          after.placement_version = spec->dry_run ? report->previous_version : report->version;
          after.balancedness = 1.0;
          double sum = 0;
          int n = 0;
          for (size_t l = 0; l < report->balancedness_after.size(); ++l) {
            bool moe = false;
            for (int e = 0; e < report->placement.num_experts && !moe; ++e) {
              moe = !report->placement.Replicas(static_cast<int64_t>(l), e).empty();
            }
            if (!moe) continue;
            after.balancedness = std::min(after.balancedness, report->balancedness_after[l]);
            sum += report->balancedness_after[l];
            ++n;
          }
          after.mean_balancedness = n > 0 ? sum / n : 1.0;
          after.window_tokens = report->window_tokens;
          result.after = after;
          result.message = absl::StrCat(spec->dry_run ? "dry run: " : "", "placement v",
                                        report->previous_version, " -> v", report->version,
                                        ", expected balancedness ", after.balancedness);
        }
      }
      const absl::Time end = clock_.Now();
      std::optional<absl::Time> next;
      if (spec->scheduled) {
        if (auto cron = CronSchedule::Parse(spec->schedule); cron.ok()) next = cron->Next(start);
      }
      (void)WriteStatus(kCalibrations, rc, CalibrationStatus(*spec, old, result, start, end, next));
      const bool failed = result.phase == CalibrationResult::Phase::kFailed;
      Event(rc, failed ? "Warning" : "Normal", CalibrationPhaseName(result.phase), result.message);
      if (result.phase != CalibrationResult::Phase::kSkipped) {
        record("calibration", failed ? absl::UnknownError(result.message) : absl::OkStatus());
        if (!failed && !spec->dry_run) {
          Event(object, "Normal", "Recalibrated", absl::StrCat(Name(rc), ": ", result.message));
        }
      }
    }
    // The cluster's own policy.
    const RecalibrationPolicy& policy = c.recalibration;
    if (policy.mode == RecalibrationPolicy::Mode::kThreshold) {
      const auto co = CoordinatorOptions(c);
      const std::string key =
          absl::StrCat(absl::FormatDuration(co.interval), " ", absl::FormatDuration(co.window), " ",
                       co.threshold, " ", co.sustain, " ", co.min_tokens, " ",
                       absl::FormatDuration(co.cooldown), " ", co.slots_per_worker);
      if (state.coordinator == nullptr || state.coordinator_options != key) {
        state.coordinator = std::make_unique<router::RecalibrationCoordinator>(co, *state.transport,
                                                                               clock_, registry_);
        state.coordinator_options = key;
      }
      if (auto d = state.coordinator->Tick(); d.has_value()) {
        if (d->action == router::CoordinatorAction::kRecalibrated) {
          record("threshold", absl::OkStatus());
          Event(object, "Normal", "Recalibrated",
                absl::StrCat("measured balancedness ", d->min_balancedness, " below ", co.threshold,
                             " for ", co.sustain, " checks: placement v",
                             d->report->previous_version, " -> v", d->report->version));
        } else if (d->action == router::CoordinatorAction::kFailed) {
          record("threshold", d->status);
          Event(object, "Warning", "RecalibrationFailed", d->status.ToString());
        }
      }
      again = std::min(
          again, std::max(absl::Milliseconds(10), state.coordinator->next_check() - clock_.Now()));
    } else if (policy.mode == RecalibrationPolicy::Mode::kScheduled) {
      auto cron = CronSchedule::Parse(policy.schedule);
      if (cron.ok()) {
        if (!state.next_scheduled.has_value()) {
          absl::Time from = clock_.Now();
          if (object.contains("status") && object["status"].contains("lastRecalibrationTime")) {
            if (auto t = ParseRfc3339(object["status"]["lastRecalibrationTime"]); t.ok()) from = *t;
          }
          state.next_scheduled = cron->Next(from);
        }
        if (clock_.Now() >= *state.next_scheduled) {
          auto report = router::Recalibrate(
              *state.transport, {.window = policy.window, .slots_per_worker = c.slots_per_worker});
          record("schedule", report.status());
          Event(object, report.ok() ? "Normal" : "Warning",
                report.ok() ? "Recalibrated" : "RecalibrationFailed",
                report.ok() ? absl::StrCat("scheduled: placement v", report->previous_version,
                                           " -> v", report->version)
                            : report.status().ToString());
          state.next_scheduled = cron->Next(clock_.Now());
        }
        again = std::min(again, std::max(absl::Seconds(1), *state.next_scheduled - clock_.Now()));
      }
    }
  } else if (state.transport == nullptr) {
    state.coordinator.reset();
  }

  // 9. Statuses.
  if (!apply_errors.empty()) error = absl::StrJoin(apply_errors, "; ");
  Json status = out->cluster_status;
  {
    // Facts learnt in this reconcile after the pure part ran.
    if (state.last_recalibration.has_value()) {
      status["lastRecalibrationTime"] = Rfc3339(*state.last_recalibration);
    }
    if (!error.empty()) {
      SetCondition(status["conditions"], "Degraded", true, "ApplyFailed", error, now, c.generation);
    }
  }
  if (auto s = WriteStatus(kClusters, object, status); !s.ok()) {
    MOE_LOG_INFO("operator: status of {}: {}", c.name, s.ToString());
  }
  for (const auto& [pool_name, ps] : out->pool_status) {
    auto it = pool_objects.find(pool_name);
    if (it == pool_objects.end()) continue;  // created this reconcile: next time
    (void)WriteStatus(kPools, it->second, ps);
  }
  for (const PoolObservation& p : out->pools) {
    const auto& pp = out->plan.pools[p.spec.name];
    metrics_->pool_replicas.Add({{"cluster", c.name}, {"pool", p.spec.name}, {"state", "desired"}})
        .Set(p.spec.replicas);
    metrics_->pool_replicas.Add({{"cluster", c.name}, {"pool", p.spec.name}, {"state", "counted"}})
        .Set(pp.counted);
  }
  if (!error.empty() && state.last_error != error) {
    Event(object, "Warning", "ApplyFailed", error);
  }
  state.last_error = error;
  metrics_->reconciles.Add({{"result", error.empty() ? "ok" : "error"}}).Increment();
  if (placement_changed) again = absl::Milliseconds(100);
  return again;
}

}  // namespace moe::op
