#include "services/router/core/load_tracker.h"

#include <vector>

#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace moe::router {
namespace {

class LoadTrackerTest : public ::testing::Test {
 protected:
  common::testing::FakeClock clock_;
  common::metrics::Registry registry_;
  LoadTracker tracker_{2, 3, clock_, registry_, absl::Seconds(1), absl::Seconds(10)};
};

TEST_F(LoadTrackerTest, WindowSumsOnlyRecentBuckets) {
  tracker_.RecordLayerTokens(0, {{0, 1}});
  tracker_.RecordLayerTokens(1, {{2, 2}});
  clock_.Advance(absl::Seconds(5));
  tracker_.RecordLayerTokens(0, {{1, 3}});
  tracker_.RecordLayerTokens(1, {{2, 1}});
  EXPECT_EQ(tracker_.Window(absl::Seconds(2)).expert_tokens,
            (std::vector<uint64_t>{0, 3, 0, 0, 0, 1}));
  EXPECT_EQ(tracker_.Window(absl::Seconds(10)).expert_tokens,
            (std::vector<uint64_t>{1, 3, 0, 0, 0, 3}));
  EXPECT_EQ(tracker_.Window(absl::Seconds(10)).span, absl::Seconds(5));
}

TEST_F(LoadTrackerTest, ForgetsPastTheHistory) {
  tracker_.RecordLayerTokens(0, {{0, 4}});
  clock_.Advance(absl::Seconds(20));
  tracker_.RecordLayerTokens(0, {{2, 1}});
  const LoadWindow w = tracker_.Window(absl::Hours(1));
  EXPECT_EQ(w.expert_tokens, (std::vector<uint64_t>{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(w.span, absl::Seconds(10));
}

TEST_F(LoadTrackerTest, MeasuredBalancednessIsMeanOverMaxOfWorkers) {
  tracker_.RecordWorkerTokens(0, 7, 30);
  tracker_.RecordWorkerTokens(0, 8, 10);
  tracker_.RecordWorkerTokens(1, 8, 5);
  const LoadWindow w = tracker_.Window(absl::Seconds(5));
  const std::vector<int32_t> workers = {7, 8, 9};
  EXPECT_DOUBLE_EQ(w.Balancedness(0, workers), (40.0 / 3) / 30);
  EXPECT_DOUBLE_EQ(w.Balancedness(1, workers), (5.0 / 3) / 5);
  tracker_.UpdateBalancednessGauges(absl::Seconds(5), workers);
  EXPECT_DOUBLE_EQ(registry_.Value("moe_expert_balancedness", {{"layer", "0"}}).value(), 4.0 / 9);
}

TEST_F(LoadTrackerTest, ExportsTheHottestExpertsOfEachLayer) {
  // Layer 0: expert 2 then 0 (1 unused); layer 1: nothing routed, so no hot series.
  tracker_.RecordLayerTokens(0, {{0, 1}, {2, 3}});
  tracker_.UpdateBalancednessGauges(absl::Seconds(5), {});
  EXPECT_EQ(registry_.Value("moe_expert_hot_id", {{"layer", "0"}, {"rank", "1"}}).value(), 2);
  EXPECT_DOUBLE_EQ(registry_.Value("moe_expert_hot_share", {{"layer", "0"}, {"rank", "1"}}).value(),
                   0.75);
  EXPECT_EQ(registry_.Value("moe_expert_hot_id", {{"layer", "0"}, {"rank", "2"}}).value(), 0);
  EXPECT_EQ(registry_.Value("moe_expert_hot_id", {{"layer", "0"}, {"rank", "3"}}).value(), 1);
  EXPECT_DOUBLE_EQ(registry_.Value("moe_expert_hot_share", {{"layer", "0"}, {"rank", "3"}}).value(),
                   0);
  EXPECT_FALSE(registry_.Value("moe_expert_hot_id", {{"layer", "0"}, {"rank", "4"}}).ok());
  EXPECT_FALSE(registry_.Value("moe_expert_hot_id", {{"layer", "1"}, {"rank", "1"}}).ok());
}

TEST_F(LoadTrackerTest, IgnoresIdsOutsideTheModel) {
  tracker_.RecordLayerTokens(0, {{-1, 5}, {3, 5}, {1, 2}});
  tracker_.RecordLayerTokens(2, {{0, 9}});
  EXPECT_EQ(tracker_.Window(absl::Seconds(5)).expert_tokens,
            (std::vector<uint64_t>{0, 2, 0, 0, 0, 0}));
}

TEST_F(LoadTrackerTest, ExportsPerExpertCounters) {
  tracker_.RecordLayerTokens(1, {{1, 6}});
  EXPECT_EQ(registry_.Value("moe_expert_tokens_total", {{"layer", "1"}, {"expert", "1"}}).value(),
            6);
}

}  // namespace
}  // namespace moe::router
