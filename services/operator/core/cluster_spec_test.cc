#include "services/operator/core/cluster_spec.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::op {
namespace {

using common::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ClusterSpecTest, AppliesTheCrdDefaults) {
  ASSERT_OK_AND_ASSIGN(ClusterSpec c, ParseCluster(R"({
    "metadata": {"name": "laptop", "namespace": "moe", "uid": "u1", "generation": 3},
    "spec": {"model": {"name": "small", "source": {"preset": {"name": "small"}}},
             "expertPools": [{"name": "lo", "experts": ["*:0-3"]},
                             {"name": "hi", "replicas": 2, "experts": ["*:4-7"],
                              "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}]}
  })"_json));
  EXPECT_EQ(c.name, "laptop");
  EXPECT_EQ(c.ns, "moe");
  EXPECT_EQ(c.generation, 3);
  EXPECT_EQ(c.routers, 1);
  ASSERT_EQ(c.pools.size(), 2u);
  EXPECT_EQ(c.pools[0].object_name, "laptop-lo");
  EXPECT_EQ(c.pools[0].replicas, 1);
  EXPECT_FALSE(c.pools[0].autoscaling.has_value());
  EXPECT_EQ(c.pools[1].replicas, 2);
  EXPECT_EQ(c.pools[1].autoscaling->max_replicas, 4);
  EXPECT_EQ(c.recalibration.mode, RecalibrationPolicy::Mode::kOnDemand);
  EXPECT_EQ(c.recalibration.window, absl::Seconds(300));
  EXPECT_EQ(c.recalibration.interval, absl::Seconds(30));
  EXPECT_DOUBLE_EQ(c.recalibration.imbalance_threshold, 0.8);
  EXPECT_DOUBLE_EQ(c.autoscaling.expert_utilisation, 0.7);
  EXPECT_FALSE(c.deleting);
}

TEST(ClusterSpecTest, NamesTheBadField) {
  EXPECT_THAT(ParseCluster(R"({"metadata": {"name": "x"}, "spec": {}})"_json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.model.name")));
  EXPECT_THAT(ParseCluster(R"({"metadata": {"name": "x"}, "spec": {"model": {"name": "m"},
                "recalibration": {"window": "soon"}}})"_json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("recalibration.window")));
  EXPECT_THAT(ParseCluster(R"({"metadata": {"name": "x"}, "spec": {"model": {"name": "m"},
                "expertPools": [{"name": "p"}]}})"_json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expertPools[0].experts")));
}

TEST(ClusterSpecTest, StandaloneExpertPoolIsNamedForItself) {
  ASSERT_OK_AND_ASSIGN(PoolSpec p, ParseExpertPool(R"({
    "metadata": {"name": "extra-gpu"},
    "spec": {"cluster": "prod", "replicas": 3, "experts": ["*:0-7"], "maxQueuedCalls": 8}})"_json));
  EXPECT_EQ(p.name, "extra-gpu");
  EXPECT_EQ(p.replicas, 3);
  EXPECT_EQ(p.max_queued_calls, 8);
  ASSERT_OK_AND_ASSIGN(PoolSpec q, ParseExpertPool(R"({
    "metadata": {"name": "prod-hot", "labels": {"moe-cluster.io/pool": "hot"}},
    "spec": {"cluster": "prod", "experts": ["*:0"]}})"_json));
  EXPECT_EQ(q.name, "hot");
}

TEST(ClusterSpecTest, CalibrationDefaultsAndSchedule) {
  ASSERT_OK_AND_ASSIGN(CalibrationSpec c, ParseCalibration(R"({
    "metadata": {"name": "once", "creationTimestamp": "2026-12-01T10:00:00Z"},
    "spec": {"cluster": "prod"}})"_json));
  EXPECT_FALSE(c.scheduled);
  EXPECT_EQ(c.window, absl::Seconds(300));
  EXPECT_EQ(c.timeout, absl::Minutes(10));
  EXPECT_EQ(c.created,
            absl::FromCivil(absl::CivilSecond(2026, 12, 1, 10, 0, 0), absl::UTCTimeZone()));
  EXPECT_THAT(ParseCalibration(R"({"metadata": {"name": "s"},
                "spec": {"cluster": "prod", "mode": "Scheduled"}})"_json),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("schedule")));
}

}  // namespace
}  // namespace moe::op
