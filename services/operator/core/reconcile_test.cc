// Reconcile as a pure function, case by case (the issue's list): a new cluster, a spec change, a
// deleted child, scale up, scale down, a worker that is not ready, a stale observation. The test
// plays API server and kubelet: what Reconcile applies becomes the observed objects, and the
// test decides which pods exist and are ready and what the routers' placement is.
#include "services/operator/core/reconcile.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/core/chart_values.h"
#include "services/operator/core/conditions.h"

namespace moe::op {
namespace {

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// A stand-in for `helm template` with the chart's naming: a ConfigMap whose router.yaml names
// the floor workers, the router StatefulSet, the gateway and one StatefulSet per pool.
std::vector<Json> Render(const Json& values) {
  const std::string f = values["fullnameOverride"];
  std::vector<std::string> workers;
  for (const Json& p : values["expertPools"]) {
    for (int j = 0; j < p["replicas"].get<int>(); ++j) {
      workers.push_back(absl::StrCat(f, "-experts-", p["name"].get<std::string>(), "-", j));
    }
  }
  std::vector<Json> out = {
      {{"apiVersion", "v1"},
       {"kind", "ConfigMap"},
       {"metadata", {{"name", f + "-config"}}},
       {"data",
        {{"router.yaml", absl::StrJoin(workers, ",")},
         {"threads", values["routers"]["config"]["core"]["num_threads"].dump()}}}},
      {{"apiVersion", "apps/v1"},
       {"kind", "StatefulSet"},
       {"metadata", {{"name", f + "-router"}}},
       {"spec", {{"replicas", values["routers"]["replicas"]}}}},
      {{"apiVersion", "apps/v1"},
       {"kind", "Deployment"},
       {"metadata", {{"name", f + "-gateway"}}},
       {"spec", {{"replicas", values["gateway"]["replicas"]}}}}};
  for (const Json& p : values["expertPools"]) {
    const std::string pool = p["name"];
    out.push_back(
        {{"apiVersion", "apps/v1"},
         {"kind", "StatefulSet"},
         {"metadata",
          {{"name", f + "-experts-" + pool}, {"labels", {{"moe-cluster.io/pool", pool}}}}},
         {"spec", {{"replicas", p["replicas"]}}}});
  }
  return out;
}

class ReconcileTest : public ::testing::Test {
 protected:
  ReconcileTest() {
    cluster_ = R"({
      "apiVersion": "moe-cluster.io/v1alpha1", "kind": "MoECluster",
      "metadata": {"name": "c", "namespace": "moe", "uid": "uid-c", "generation": 1},
      "spec": {"model": {"name": "tiny", "source": {"preset": {"name": "tiny"}}},
               "expertPools": [{"name": "a", "replicas": 1, "experts": ["*:0-7"],
                                "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}]}})"_json;
  }

  // One reconcile with the world as it is; applies its output to the world (server side).
  ReconcileOutput Step(std::optional<int> pool_replicas = std::nullopt) {
    ReconcileInput in;
    auto spec = ParseCluster(cluster_);
    EXPECT_TRUE(spec.ok()) << spec.status();
    in.cluster = *spec;
    in.pools = in.cluster.pools;
    if (pool_replicas.has_value()) in.pools[0].replicas = *pool_replicas;
    in.cluster_status = status_;
    auto values = ChartValues(in.cluster, in.pools, Json::object());
    EXPECT_TRUE(values.ok());
    in.rendered = Render(*values);
    for (const auto& [k, o] : objects_) {
      (o["kind"] == "ExpertPool" ? in.expert_pools[k.name] = o : in.owned.emplace_back(o), 0);
    }
    in.pods = pods_;
    in.placement = placement_;
    in.applied = applied_;
    in.now = kNow;
    auto out = Reconcile(in);
    EXPECT_TRUE(out.ok()) << out.status();
    for (const Json& o : out->apply) {
      Json stored = o;
      const ObjectKey k = KeyOf(o);
      auto old = objects_.find(k);
      int64_t g = old == objects_.end() ? 1 : old->second["metadata"].value("generation", 1);
      if (old != objects_.end() && old->second.value("spec", Json()) != o.value("spec", Json()))
        ++g;
      stored["metadata"]["generation"] = g;
      stored["status"] = old == objects_.end() ? Json{{"observedGeneration", g}}
                                               : old->second.value("status", Json::object());
      stored["status"]["observedGeneration"] = g;
      objects_[k] = stored;
      applied_[k] = ObjectHash(o);
    }
    for (const ObjectKey& k : out->remove) objects_.erase(k);
    status_ = out->cluster_status;
    return *out;
  }

  // The kubelet: `ready` pods of pool a (of the StatefulSet's replicas) exist and are ready.
  void Pods(int exist, int ready) {
    pods_.clear();
    for (int j = 0; j < exist; ++j) {
      pods_.push_back(
          {{"metadata", {{"name", absl::StrCat("c-experts-a-", j)}}},
           {"status",
            {{"podIP", absl::StrCat("10.0.0.", j + 1)},
             {"conditions", {{{"type", "Ready"}, {"status", j < ready ? "True" : "False"}}}}}}});
    }
  }
  void Placement(const std::vector<int32_t>& ids) {
    placement_ = {};
    placement_.known = placement_.agreed = true;
    placement_.version = ++version_;
    for (int32_t id : ids) {
      const int ordinal = id >= kExtraWorkerIdBase ? id - kExtraWorkerIdBase : id;
      placement_.workers.push_back(
          {id, absl::StrCat("c-experts-a-", ordinal, ".c-experts-a.moe.svc:50052")});
    }
  }
  const Json& Object(const char* kind, const std::string& name) {
    for (const auto& [k, o] : objects_) {
      if (k.kind == kind && k.name == name) return o;
    }
    static const Json kNull;
    return kNull;
  }
  static std::string Kinds(const std::vector<Json>& objs) {
    std::vector<std::string> out;
    for (const Json& o : objs)
      out.push_back(absl::StrCat(o["kind"].get<std::string>(), "/",
                                 o["metadata"]["name"].get<std::string>()));
    return absl::StrJoin(out, " ");
  }
  std::string Condition(const char* type) {
    const Json* c = FindCondition(status_["conditions"], type);
    return c == nullptr ? "-"
                        : absl::StrCat((*c)["status"].get<std::string>(), "/",
                                       (*c)["reason"].get<std::string>());
  }

  Json cluster_;
  Json status_ = Json::object();
  std::map<ObjectKey, Json> objects_;
  std::map<ObjectKey, uint64_t> applied_;
  std::vector<Json> pods_;
  PlacementObservation placement_;
  uint64_t version_ = 0;
};

TEST_F(ReconcileTest, NewClusterAppliesEverythingExpertPoolsFirst) {
  ReconcileOutput out = Step();
  EXPECT_EQ(Kinds(out.apply),
            "ExpertPool/c-a ConfigMap/c-config StatefulSet/c-router StatefulSet/c-experts-a "
            "Deployment/c-gateway");
  EXPECT_TRUE(out.remove.empty());
  EXPECT_FALSE(out.plan.placement_target.has_value());  // no router answered yet
  EXPECT_EQ(Condition("Ready"), "False/ReplicasNotReady");
  EXPECT_EQ(Condition("Progressing"), "True/ScalingPool");
  EXPECT_EQ(status_["endpoint"], "http://c-gateway.moe.svc:80");
  // Nothing changed: nothing is applied again.
  EXPECT_EQ(Kinds(Step().apply), "");
}

TEST_F(ReconcileTest, SpecChangeReappliesOnlyWhatChanged) {
  Step();
  cluster_["spec"]["routers"] = {{"numThreads", 4}};
  cluster_["metadata"]["generation"] = 2;
  ReconcileOutput out = Step();
  EXPECT_EQ(Kinds(out.apply), "ConfigMap/c-config");
  EXPECT_EQ(status_["observedGeneration"], 2);
}

TEST_F(ReconcileTest, DeletedChildIsRecreated) {
  Step();
  objects_.erase(KeyOf(Object("Deployment", "c-gateway")));
  EXPECT_EQ(Kinds(Step().apply), "Deployment/c-gateway");
}

TEST_F(ReconcileTest, RemovedPoolIsPlacedAwayBeforeItsStatefulSetGoes) {
  cluster_["spec"]["expertPools"].push_back(R"({"name": "b", "experts": ["*:0-7"]})"_json);
  Step();
  Pods(1, 1);
  placement_ = {};
  placement_.known = placement_.agreed = true;
  placement_.workers = {{0, "c-experts-a-0.c-experts-a.moe.svc:50052"},
                        {1, "c-experts-b-0.c-experts-b.moe.svc:50052"}};
  cluster_["spec"]["expertPools"].erase(1);
  ReconcileOutput out = Step();
  ASSERT_TRUE(out.plan.placement_target.has_value());
  EXPECT_EQ(out.plan.placement_target->size(), 1u);  // only a's worker
  for (const ObjectKey& k : out.remove) EXPECT_NE(k.name, "c-experts-b") << "still placed";
  Placement({0});
  out = Step();
  std::vector<std::string> removed;
  for (const ObjectKey& k : out.remove) removed.push_back(k.kind + "/" + k.name);
  EXPECT_EQ(absl::StrJoin(removed, " "), "StatefulSet/c-experts-b ExpertPool/c-b");
}

TEST_F(ReconcileTest, ScaleUpGrowsThenPlacesThenCounts) {
  Step();
  Pods(1, 1);
  Placement({0});
  Step();
  EXPECT_EQ(Condition("Ready"), "False/ReplicasNotReady");  // routers, gateway not ready
  // The autoscaler asks for 3.
  ReconcileOutput out = Step(3);
  EXPECT_EQ(Kinds(out.apply), "ExpertPool/c-a StatefulSet/c-experts-a");
  EXPECT_EQ(Object("StatefulSet", "c-experts-a")["spec"]["replicas"], 3);
  EXPECT_EQ(Object("ExpertPool", "c-a")["spec"]["replicas"], 3);
  EXPECT_FALSE(out.plan.placement_target.has_value());
  // The new workers start; one is ready.
  Pods(3, 2);
  out = Step(3);
  EXPECT_FALSE(out.plan.placement_target.has_value());
  EXPECT_EQ(out.pool_status["c-a"]["readyReplicas"], 1);  // placed and ready only
  // All ready: switch onto them.
  Pods(3, 3);
  out = Step(3);
  ASSERT_TRUE(out.plan.placement_target.has_value());
  EXPECT_EQ(out.plan.placement_target->size(), 3u);
  EXPECT_EQ((*out.plan.placement_target)[1].address, "c-experts-a-1.c-experts-a.moe.svc:50052");
  EXPECT_EQ(Condition("Recalibrating"), "True/PlacementChanging");
  Placement({0, kExtraWorkerIdBase + 1, kExtraWorkerIdBase + 2});
  out = Step(3);
  EXPECT_TRUE(out.plan.steady());
  EXPECT_EQ(out.pool_status["c-a"]["readyReplicas"], 3);
  EXPECT_EQ(status_["expertWorkers"], R"({"replicas": 3, "ready": 3})"_json);
}

TEST_F(ReconcileTest, ScaleDownPlacesAwayThenShrinks) {
  Step(3);
  Pods(3, 3);
  Placement({0, kExtraWorkerIdBase + 1, kExtraWorkerIdBase + 2});
  Step(3);
  ReconcileOutput out = Step(1);
  ASSERT_TRUE(out.plan.placement_target.has_value());
  EXPECT_EQ(out.plan.placement_target->size(), 1u);
  EXPECT_EQ(Object("StatefulSet", "c-experts-a")["spec"]["replicas"], 3);  // not yet
  Placement({0});
  out = Step(1);
  EXPECT_EQ(Object("StatefulSet", "c-experts-a")["spec"]["replicas"], 1);
  EXPECT_EQ(out.plan.pools["a"].phase, PoolPhase::kScalingDown);
  Pods(1, 1);
  EXPECT_TRUE(Step(1).plan.steady());
}

TEST_F(ReconcileTest, WorkerNotReadyDegradesButKeepsThePlacement) {
  Step(2);
  Pods(2, 2);
  Placement({0, kExtraWorkerIdBase + 1});
  Step(2);
  Pods(2, 1);  // a-1 fails its readiness probe
  ReconcileOutput out = Step(2);
  EXPECT_FALSE(out.plan.placement_target.has_value());
  EXPECT_EQ(Condition("Degraded"), "True/PlacedWorkerNotReady");
  EXPECT_EQ(out.pool_status["c-a"]["readyReplicas"], 1);
  EXPECT_EQ((*FindCondition(out.pool_status["c-a"]["conditions"], "Degraded"))["reason"],
            "PlacedWorkerNotReady");
}

TEST_F(ReconcileTest, StaleObservationWaits) {
  Step();
  Pods(1, 1);
  Placement({0});
  Step();
  Step(2);
  // The StatefulSet's controller has not seen the new spec yet: its pods say nothing new.
  for (auto& [k, o] : objects_) {
    if (k.name == "c-experts-a") o["status"]["observedGeneration"] = 1;
  }
  Pods(2, 2);
  ReconcileOutput out = Step(2);
  EXPECT_EQ(out.plan.pools["a"].phase, PoolPhase::kWaiting);
  EXPECT_FALSE(out.plan.placement_target.has_value());
  EXPECT_EQ(Condition("Progressing"), "True/ScalingPool");
}

}  // namespace
}  // namespace moe::op
