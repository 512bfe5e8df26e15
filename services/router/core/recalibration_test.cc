#include "services/router/core/recalibration.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/testing/fake_recalibration_transport.h"

namespace moe::router {
namespace {

using common::testing::StatusIs;

// Two routers and three workers in memory (testing/fake_recalibration_transport.h), expert 0 hot
// on both routers, no measured worker tokens. The fake checks the protocol's invariant on every
// step: each (layer, expert) of every router's active table is resident on a worker that the
// table names.
class FakeCluster : public testing::FakeRecalibrationTransport {
 public:
  FakeCluster() : FakeRecalibrationTransport(/*num_routers=*/2) {
    SetLoad({60, 10, 10, 10, 5, 5}, WorkerTokens{});
    check_live_replicas_ = true;
  }
};

TEST(RecalibrationTest, LoadsSwitchesThenUnloadsKeepingEveryExpertLive) {
  FakeCluster cluster;
  RecalibrationOptions o;
  auto report = Recalibrate(cluster, o);
  ASSERT_OK(report.status());
  EXPECT_EQ(report->previous_version, 0u);
  EXPECT_EQ(report->version, 1u);
  EXPECT_EQ(report->slots_per_worker, 3);
  EXPECT_EQ(report->window_tokens, 200u);
  EXPECT_GT(report->balancedness_after[0], report->balancedness_before[0]);
  EXPECT_THAT(cluster.log_, ::testing::MatchesRegex("stats0 stats1 (load )+set0 set1 (unload )*"));
  EXPECT_EQ(cluster.active_[0].version, 1u);
  EXPECT_EQ(cluster.active_[1].version, 1u);
  EXPECT_GE(cluster.active_[0].Replicas(0, 0).size(), 2u);
}

TEST(RecalibrationTest, DryRunChangesNothing) {
  FakeCluster cluster;
  RecalibrationOptions o;
  o.dry_run = true;
  auto report = Recalibrate(cluster, o);
  ASSERT_OK(report.status());
  EXPECT_EQ(cluster.log_, "stats0 stats1 ");
  EXPECT_EQ(cluster.active_[0].version, 0u);
}

TEST(RecalibrationTest, RefusesRoutersOnTheSameVersionWithDifferentTables) {
  FakeCluster cluster;
  cluster.active_[1].MutableReplicas(0, 0) = {1};
  cluster.resident_["w1"].insert({0, 0});
  EXPECT_THAT(Recalibrate(cluster, {}), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(cluster.log_, "stats0 stats1 ");
}

// A recalibration stopped after switching router 1 to v1 (expert 0 also on w1, loaded in step 1)
// and before router 0: the next run switches router 0 first, unloads what only v0 placed, then
// recalibrates as usual. The fake checks after every step that each router's experts are live.
TEST(RecalibrationTest, FinishesAnInterruptedSwitchFirst) {
  FakeCluster cluster;
  PlacementTable v1 = cluster.active_[0];
  v1.version = 1;
  v1.MutableReplicas(0, 0) = {1};  // moved from w0 to w1
  cluster.resident_["w1"].insert({0, 0});
  cluster.active_[1] = v1;

  RecalibrationOptions dry;
  dry.dry_run = true;
  EXPECT_THAT(Recalibrate(cluster, dry), StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(cluster.log_, "stats0 stats1 ");

  cluster.log_.clear();
  auto report = Recalibrate(cluster, {});
  ASSERT_OK(report.status());
  EXPECT_EQ(report->routers_converged, 1);
  EXPECT_EQ(report->previous_version, 1u);
  EXPECT_EQ(report->version, 2u);
  EXPECT_EQ(cluster.log_.substr(0, 25), "stats0 stats1 set0 unload");
  EXPECT_EQ(cluster.active_[0].version, 2u);
  EXPECT_EQ(cluster.active_[1].version, 2u);

  // Already in agreement: nothing to finish.
  std::vector<RouterLoadReport> reports = {{"r0", cluster.active_[0], {}},
                                           {"r1", cluster.active_[1], {}}};
  cluster.log_.clear();
  EXPECT_THAT(CompleteInterruptedSwitch(cluster, reports), common::testing::IsOkAndHolds(0));
  EXPECT_EQ(cluster.log_, "");
}

TEST(RecalibrationTest, DiffListsAddedReplicasPerWorker) {
  PlacementTable a;
  a.num_layers = 1;
  a.num_experts = 2;
  a.workers = {{0, "x"}, {1, "y"}};
  a.replicas = {{0}, {1}};
  PlacementTable b = a;
  b.replicas = {{0, 1}, {1}};
  const auto diff = PlacementDiff(a, b);
  ASSERT_EQ(diff.size(), 1u);
  EXPECT_EQ(diff.at("y"), (std::vector<model::ExpertKey>{{0, 0}}));
  EXPECT_TRUE(PlacementDiff(b, b).empty());
}

TEST(RecalibrationTest, AggregateLoadSumsRoutersAndMeasuresPerWorker) {
  PlacementTable t;
  t.num_layers = 2;  // layer 0 dense, layer 1 MoE
  t.num_experts = 2;
  t.workers = {{0, "x"}, {1, "y"}, {2, "z"}};
  t.replicas = {{}, {}, {0}, {1, 2}};
  const std::vector<RouterLoadReport> reports = {
      {"a", t, {0, 0, 30, 10}, {{0, {0, 30}}, {1, {0, 10}}}},
      {"b", t, {0, 0, 10, 10}, {{0, {0, 10}}, {2, {0, 10}}}},
  };
  auto load = AggregateLoad(reports);
  ASSERT_OK(load.status());
  EXPECT_EQ(load->window_tokens, 60u);
  EXPECT_EQ(load->expert_tokens, (std::vector<uint64_t>{0, 0, 40, 20}));
  EXPECT_EQ(load->worker_tokens, (WorkerTokens{{0, {0, 40}}, {1, {0, 10}}, {2, {0, 10}}}));
  EXPECT_TRUE(HasWorkerTokens(load->worker_tokens));
  // Layer 1: workers 40, 10, 10 -> mean 20 / max 40.
  EXPECT_EQ(MeasuredBalancedness(load->placement, load->worker_tokens),
            (std::vector<double>{1.0, 0.5}));
  // A worker of the placement that processed nothing counts as 0.
  EXPECT_EQ(MeasuredBalancedness(t, WorkerTokens{{0, {0, 30}}, {1, {0, 30}}}),
            (std::vector<double>{1.0, 20.0 / 30}));
  EXPECT_EQ(MeasuredBalancedness(t, {}), (std::vector<double>{1.0, 1.0}));
  EXPECT_FALSE(HasWorkerTokens(WorkerTokens{{0, {0, 0}}}));
  // The judged figure ignores the dense layer.
  EXPECT_EQ(MinOverMoeLayers(t, std::vector<double>{0.1, 0.5}), 0.5);
}

TEST(RecalibrationTest, AggregateLoadRefusesWindowsOfAnotherShape) {
  PlacementTable t;
  t.num_layers = 1;
  t.num_experts = 2;
  t.workers = {{0, "x"}};
  t.replicas = {{0}, {0}};
  EXPECT_THAT(AggregateLoad(std::vector<RouterLoadReport>{{"a", t, {1, 2, 3}, {}}}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(AggregateLoad(std::vector<RouterLoadReport>{{"a", t, {1, 2}, {{0, {1, 2}}}}}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(AggregateLoad({}), StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace moe::router
