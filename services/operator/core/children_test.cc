#include "services/operator/core/children.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::op {
namespace {

using common::testing::StatusIs;

ClusterSpec Cluster() {
  auto c = ParseCluster(R"({
    "metadata": {"name": "c1", "namespace": "moe", "uid": "uid-1"},
    "spec": {"model": {"name": "tiny", "source": {"preset": {"name": "tiny"}}},
             "expertPools": [{"name": "all", "experts": ["*:0-7"],
                              "autoscaling": {"minReplicas": 1, "maxReplicas": 3}}]}})"_json);
  return *c;
}

// What the chart renders, in a few objects.
std::vector<Json> Rendered() {
  return {
      R"({"apiVersion": "apps/v1", "kind": "StatefulSet",
          "metadata": {"name": "c1-experts-all", "labels": {"app.kubernetes.io/managed-by": "Helm",
            "moe-cluster.io/pool": "all"}},
          "spec": {"replicas": 1, "template": {"metadata": {"labels": {"a": "b"}}}}})"_json,
      R"({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1-config"},
          "data": {"router.yaml": "x"}})"_json,
      R"({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "c1-router"},
          "spec": {"replicas": 1}})"_json,
  };
}

TEST(ChildrenTest, OwnsLabelsAndOrdersTheRenderedObjects) {
  ASSERT_OK_AND_ASSIGN(auto objs,
                       DesiredObjects(Cluster(), Rendered(), {{"all", 3}}, {{"all", 2}}));
  ASSERT_EQ(objs.size(), 4u);
  // ExpertPools first, then configuration, then workloads.
  EXPECT_EQ(objs[0]["kind"], "ExpertPool");
  EXPECT_EQ(objs[0]["metadata"]["name"], "c1-all");
  EXPECT_EQ(objs[0]["spec"]["replicas"], 2);
  EXPECT_EQ(objs[0]["spec"]["cluster"], "c1");
  EXPECT_EQ(objs[0]["spec"]["autoscaling"]["maxReplicas"], 3);
  EXPECT_EQ(objs[1]["kind"], "ConfigMap");
  EXPECT_EQ(objs[2]["metadata"]["name"], "c1-experts-all");
  for (const Json& o : objs) {
    EXPECT_EQ(o["metadata"]["namespace"], "moe");
    EXPECT_EQ(o["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    EXPECT_EQ(o["metadata"]["ownerReferences"][0]["kind"], "MoECluster");
    EXPECT_EQ(o["metadata"]["labels"]["app.kubernetes.io/managed-by"], "moe-operator");
    EXPECT_EQ(o["metadata"]["labels"]["moe-cluster.io/cluster"], "c1");
    EXPECT_TRUE(IsControlledBy(o, "uid-1"));
  }
  // The pool's StatefulSet takes the plan's replicas; pod templates carry the labels too.
  EXPECT_EQ(objs[2]["spec"]["replicas"], 3);
  EXPECT_EQ(objs[2]["spec"]["template"]["metadata"]["labels"]["moe-cluster.io/cluster"], "c1");
  EXPECT_EQ(objs[2]["spec"]["template"]["metadata"]["labels"]["a"], "b");
  EXPECT_EQ(objs[3]["spec"]["replicas"], 1);  // the routers' are the chart's
}

TEST(ChildrenTest, RefusesAKindItDoesNotManage) {
  auto r = Rendered();
  r.push_back(R"({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                  "metadata": {"name": "x"}})"_json);
  EXPECT_THAT(DesiredObjects(Cluster(), r, {}, {}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChildrenTest, OrphansAreOwnedObjectsNoLongerDesired) {
  ASSERT_OK_AND_ASSIGN(auto desired, DesiredObjects(Cluster(), Rendered(), {}, {}));
  std::vector<Json> owned = desired;
  owned.push_back(R"({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                      "metadata": {"name": "c1-experts-old", "namespace": "moe"}})"_json);
  auto orphans = Orphans(owned, desired);
  ASSERT_EQ(orphans.size(), 1u);
  EXPECT_EQ(orphans[0].DebugString(), "policy/v1 PodDisruptionBudget moe/c1-experts-old");
}

}  // namespace
}  // namespace moe::op
