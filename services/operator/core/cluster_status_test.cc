#include "services/operator/core/cluster_status.h"

#include "gtest/gtest.h"
#include "services/operator/core/conditions.h"

namespace moe::op {
namespace {

const absl::Time kT = absl::FromUnixSeconds(1'800'000'000);

TEST(ClusterStatusTest, ConditionsKeepTheirTransitionTimeWhileUnchanged) {
  Json conds;
  EXPECT_TRUE(SetCondition(conds, "Ready", false, "ReplicasNotReady", "m", kT, 1));
  EXPECT_FALSE(
      SetCondition(conds, "Ready", false, "ReplicasNotReady", "m", kT + absl::Hours(1), 2));
  EXPECT_EQ((*FindCondition(conds, "Ready"))["lastTransitionTime"], Rfc3339(kT));
  EXPECT_EQ((*FindCondition(conds, "Ready"))["observedGeneration"], 2);
  EXPECT_TRUE(SetCondition(conds, "Ready", true, "AllReplicasReady", "", kT + absl::Hours(2), 2));
  EXPECT_EQ((*FindCondition(conds, "Ready"))["lastTransitionTime"], Rfc3339(kT + absl::Hours(2)));
}

TEST(ClusterStatusTest, RoleOfAWorkload) {
  const Json sts = R"({"metadata": {"generation": 2}, "spec": {"replicas": 3},
                       "status": {"observedGeneration": 2, "readyReplicas": 2, "updatedReplicas": 3}})"_json;
  RoleObservation r = RoleOf(&sts, true);
  EXPECT_TRUE(r.present);
  EXPECT_EQ(r.replicas, 3);
  EXPECT_EQ(r.ready, 2);
  EXPECT_FALSE(r.rolling);
  const Json hpa_owned = R"({"metadata": {"generation": 3}, "spec": {},
                             "status": {"observedGeneration": 2, "replicas": 4}})"_json;
  r = RoleOf(&hpa_owned, true);
  EXPECT_EQ(r.replicas, 4);
  EXPECT_TRUE(r.rolling);
  EXPECT_FALSE(RoleOf(nullptr, true).present);
}

TEST(ClusterStatusTest, ReadyWhenEveryRoleIsAndPlacementAgrees) {
  ClusterSpec c;
  c.generation = 5;
  ClusterObservation o;
  o.gateway = {.wanted = true, .present = true, .replicas = 1, .ready = 1};
  o.routers = {.wanted = true, .present = true, .replicas = 2, .ready = 2};
  o.placement.known = o.placement.agreed = true;
  o.placement.version = 7;
  o.balancedness = 0.93;
  Json s = ClusterStatus(c, Json::object(), o, kT);
  EXPECT_EQ((*FindCondition(s["conditions"], "Ready"))["status"], "True");
  EXPECT_EQ((*FindCondition(s["conditions"], "Degraded"))["status"], "False");
  EXPECT_EQ(s["placementVersion"], 7);
  EXPECT_EQ(s["routers"], R"({"replicas": 2, "ready": 2})"_json);
  EXPECT_FALSE(s.contains("kvStore"));
  o.error = "render: helm failed";
  s = ClusterStatus(c, s, o, kT);
  EXPECT_EQ((*FindCondition(s["conditions"], "Ready"))["reason"], "ReconcileFailed");
  EXPECT_EQ((*FindCondition(s["conditions"], "Degraded"))["message"], "render: helm failed");
}

}  // namespace
}  // namespace moe::op
