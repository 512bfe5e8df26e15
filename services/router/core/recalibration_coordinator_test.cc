#include "services/router/core/recalibration_coordinator.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/testing/fake_recalibration_transport.h"

namespace moe::router {
namespace {

using common::testing::FakeClock;

// One router (or more) and three workers in memory (testing/fake_recalibration_transport.h): one
// MoE layer of 6 experts placed round robin, skewed load unless the test sets another.
using FakeCluster = testing::FakeRecalibrationTransport;

class RecalibrationCoordinatorTest : public ::testing::Test {
 protected:
  RecalibrationCoordinatorOptions Options() {
    return {.interval = absl::Seconds(10),
            .window = absl::Seconds(60),
            .threshold = 0.8,
            .sustain = 3,
            .min_tokens = 500,
            .cooldown = absl::Seconds(60),
            .slots_per_worker = 3};
  }
  // Ticks every `interval` for `n` checks; returns "action:low_checks ..." of the decisions.
  std::string Run(RecalibrationCoordinator& c, int n) {
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
      if (i > 0) {
        EXPECT_FALSE(c.Tick().has_value()) << "no check is due before the interval";
        clock_.Advance(c.options().interval);
      }
      auto d = c.Tick();
      EXPECT_TRUE(d.has_value());
      if (!d.has_value()) break;
      decisions_.push_back(*d);
      out.push_back(absl::StrCat(CoordinatorActionName(d->action), ":", d->low_checks));
    }
    return absl::StrJoin(out, " ");
  }
  double Metric(const std::string& name, const common::metrics::Labels& labels = {}) {
    auto v = registry_.Value(name, labels);
    return v.ok() ? *v : -1;
  }

  FakeClock clock_;
  common::metrics::Registry registry_;
  std::vector<CoordinatorDecision> decisions_;
};

TEST_F(RecalibrationCoordinatorTest, OptionsValidate) {
  EXPECT_OK(Options().Validate());
  RecalibrationCoordinatorOptions o = Options();
  o.sustain = 0;
  EXPECT_FALSE(o.Validate().ok());
  o = Options();
  o.threshold = 1.5;
  EXPECT_FALSE(o.Validate().ok());
}

TEST_F(RecalibrationCoordinatorTest, RecalibratesAfterSustainLowChecksAndNotBefore) {
  FakeCluster cluster;
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 2), "low:1 low:2");
  EXPECT_EQ(cluster.log_, "stats0 stats0 ");
  EXPECT_EQ(cluster.active_[0].version, 0u);
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Run(c, 1), "recalibrated:0");
  EXPECT_THAT(cluster.log_,
              ::testing::MatchesRegex("stats0 stats0 stats0 (load )+set0 (unload )*"));
  EXPECT_EQ(cluster.active_[0].version, 1u);
  EXPECT_GE(cluster.active_[0].Replicas(0, 0).size(), 2u) << "the hot expert is replicated";
  EXPECT_EQ(cluster.windows_, (std::set<absl::Duration>{absl::Seconds(60)}));

  const CoordinatorDecision& d = decisions_.back();
  EXPECT_TRUE(d.measured);
  EXPECT_EQ(d.window_tokens, 1000u);
  EXPECT_NEAR(d.min_balancedness, (1000.0 / 3) / 700, 1e-9);  // workers 700, 150, 150
  ASSERT_TRUE(d.report.has_value());
  EXPECT_GT(d.report->balancedness_after[0], d.report->balancedness_before[0]);

  EXPECT_EQ(Metric("moe_coordinator_checks_total", {{"decision", "low"}}), 2);
  EXPECT_EQ(Metric("moe_coordinator_checks_total", {{"decision", "recalibrated"}}), 1);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "ok"}}), 1);
  EXPECT_NEAR(Metric("moe_coordinator_min_balancedness"), (1000.0 / 3) / 700, 1e-9);
  EXPECT_EQ(Metric("moe_coordinator_low_checks"), 0);
}

TEST_F(RecalibrationCoordinatorTest, ABalancedCheckRestartsTheStreak) {
  FakeCluster cluster;
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 2), "low:1 low:2");
  cluster.SetEven();
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Run(c, 1), "balanced:0");
  cluster.SetSkewed();
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Run(c, 3), "low:1 low:2 recalibrated:0");
}

TEST_F(RecalibrationCoordinatorTest, BalancedClusterIsNeverRecalibrated) {
  FakeCluster cluster;
  cluster.SetEven();
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 6), "balanced:0 balanced:0 balanced:0 balanced:0 balanced:0 balanced:0");
  EXPECT_EQ(cluster.active_[0].version, 0u);
  EXPECT_EQ(Metric("moe_coordinator_checks_total", {{"decision", "balanced"}}), 6);
  EXPECT_EQ(Metric("moe_coordinator_min_balancedness"), 1.0);
}

TEST_F(RecalibrationCoordinatorTest, IdleClusterIsNeverRecalibrated) {
  FakeCluster cluster;
  cluster.SetLoad({300, 50, 50, 50, 25, 24});  // 499 tokens, skewed
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 5), "idle:0 idle:0 idle:0 idle:0 idle:0");
  EXPECT_EQ(cluster.active_[0].version, 0u);
  EXPECT_LT(decisions_.back().min_balancedness, 0.8) << "judged skewed, but too little traffic";
}

TEST_F(RecalibrationCoordinatorTest, CooldownHoldsOffThenNoChurnOnAnAlreadyBestPlacement) {
  FakeCluster cluster;
  RecalibrationCoordinatorOptions o = Options();
  o.sustain = 1;
  RecalibrationCoordinator c(o, cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 1), "recalibrated:0");
  ASSERT_EQ(cluster.active_[0].version, 1u);
  // The routers still report the old window (worker tokens of the old placement, skewed): the
  // cooldown keeps the coordinator from acting on it; after it, the placement computed again
  // would be the same one, so nothing changes.
  clock_.Advance(absl::Seconds(10));
  EXPECT_EQ(Run(c, 7),
            "cooldown:0 cooldown:0 cooldown:0 cooldown:0 cooldown:0 skipped:0 skipped:0");
  EXPECT_EQ(cluster.active_[0].version, 1u);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "skipped"}}), 2);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "ok"}}), 1);
}

TEST_F(RecalibrationCoordinatorTest, SkipsWhenNoPlacementWouldImprove) {
  // Even expert load, yet the workers measured uneven (e.g. replica choice): a new placement
  // cannot do better than the current one under the load model, so nothing moves.
  FakeCluster cluster;
  cluster.SetLoad({100, 100, 100, 100, 100, 100}, WorkerTokens{{0, {400}}, {1, {100}}, {2, {100}}});
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 4), "low:1 low:2 skipped:0 low:1");
  EXPECT_EQ(cluster.active_[0].version, 0u);
  ASSERT_TRUE(decisions_[2].report.has_value());
  EXPECT_EQ(decisions_[2].report->balancedness_before[0], 1.0);
  EXPECT_THAT(cluster.log_, ::testing::Not(::testing::HasSubstr("load")));
}

TEST_F(RecalibrationCoordinatorTest, FailedRecalibrationIsReportedAndRetriedAfterTheInterval) {
  FakeCluster cluster;
  cluster.load_failures_ = 1;
  RecalibrationCoordinatorOptions o = Options();
  o.sustain = 1;
  RecalibrationCoordinator c(o, cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 2), "failed:1 recalibrated:0");
  EXPECT_THAT(decisions_[0].status, common::testing::StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(decisions_[0].report.has_value());
  EXPECT_EQ(cluster.active_[0].version, 1u);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "failed"}}), 1);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "ok"}}), 1);
}

TEST_F(RecalibrationCoordinatorTest, UnreachableRouterIsReportedWithoutCountingARecalibration) {
  FakeCluster cluster;
  cluster.stats_error_ = true;
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 1), "failed:0");
  EXPECT_THAT(decisions_[0].status, common::testing::StatusIs(absl::StatusCode::kUnavailable));
  EXPECT_EQ(Metric("moe_coordinator_checks_total", {{"decision", "failed"}}), 1);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "failed"}}), -1);
}

TEST_F(RecalibrationCoordinatorTest, DryRunDecidesButChangesNothing) {
  FakeCluster cluster;
  RecalibrationCoordinatorOptions o = Options();
  o.dry_run = true;
  RecalibrationCoordinator c(o, cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 4), "low:1 low:2 dry_run:0 cooldown:0");
  EXPECT_EQ(cluster.log_, "stats0 stats0 stats0 stats0 ");
  EXPECT_EQ(cluster.active_[0].version, 0u);
  ASSERT_TRUE(decisions_[2].report.has_value());
  EXPECT_EQ(decisions_[2].report->version, 1u);
  EXPECT_EQ(Metric("moe_coordinator_recalibrations_total", {{"result", "dry_run"}}), 1);
}

TEST_F(RecalibrationCoordinatorTest, JudgesExpectedBalancednessWhenNoWorkerTokensAreReported) {
  FakeCluster cluster;
  cluster.SetLoad({600, 100, 100, 100, 50, 50}, WorkerTokens{});  // an older router
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 1), "low:1");
  EXPECT_FALSE(decisions_[0].measured);
  EXPECT_NEAR(decisions_[0].min_balancedness, (1000.0 / 3) / 700, 1e-9);  // 700, 150, 150
}

TEST_F(RecalibrationCoordinatorTest, SumsEveryRoutersLoad) {
  FakeCluster cluster(/*num_routers=*/2);
  RecalibrationCoordinatorOptions o = Options();
  o.min_tokens = 1500;  // each router alone reports 1000
  o.sustain = 1;
  RecalibrationCoordinator c(o, cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 1), "recalibrated:0");
  EXPECT_EQ(decisions_[0].window_tokens, 2000u);
  EXPECT_EQ(cluster.active_[0].version, 1u);
  EXPECT_EQ(cluster.active_[1].version, 1u);
}

TEST_F(RecalibrationCoordinatorTest, RoutersOnTheSameVersionWithDifferentTablesAreAFailedCheck) {
  FakeCluster cluster(/*num_routers=*/2);
  cluster.active_[1].MutableReplicas(0, 0) = {1};
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 1), "failed:0");
  EXPECT_THAT(decisions_[0].status,
              common::testing::StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(cluster.log_, "stats0 stats1 ");
}

TEST_F(RecalibrationCoordinatorTest, FinishesAnInterruptedSwitchBeforeJudging) {
  // Router 1 reached v3 and router 0 did not (the earlier recalibration stopped mid-switch).
  FakeCluster cluster(/*num_routers=*/2);
  cluster.active_[1].version = 3;
  cluster.SetEven();
  RecalibrationCoordinator c(Options(), cluster, clock_, registry_);
  EXPECT_EQ(Run(c, 1), "balanced:0");
  EXPECT_EQ(decisions_[0].routers_converged, 1);
  EXPECT_EQ(decisions_[0].placement_version, 3u);
  EXPECT_EQ(cluster.active_[0].version, 3u);
  EXPECT_EQ(cluster.log_, "stats0 stats1 set0 ");  // same replicas: nothing to unload
  // A dry run never switches: the disagreement stays a failed check.
  FakeCluster other(/*num_routers=*/2);
  other.active_[1].version = 3;
  RecalibrationCoordinatorOptions dry = Options();
  dry.dry_run = true;
  RecalibrationCoordinator d(dry, other, clock_, registry_);
  auto decision = d.Check();
  EXPECT_EQ(decision.action, CoordinatorAction::kFailed);
  EXPECT_EQ(other.active_[0].version, 0u);
}

}  // namespace
}  // namespace moe::router
