#include "services/operator/core/autoscaler.h"

#include "gtest/gtest.h"

namespace moe::op {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

class AutoscalerTest : public ::testing::Test {
 protected:
  AutoscalerOptions options_{.tolerance = 0.1,
                             .scale_up_stabilization = absl::Seconds(10),
                             .scale_down_stabilization = absl::Seconds(60),
                             .cooldown = absl::Seconds(30),
                             .max_scale_up_step = 2,
                             .max_scale_down_step = 1};
  AutoscalerState state_;
  // One sample every 5 s from kT0 + at.
  ScaleDecision At(int seconds, int current, std::optional<double> util) {
    return Recommend(options_, state_, kT0 + absl::Seconds(seconds), current, util, 0.5,
                     Bounds{1, 4});
  }
};

TEST_F(AutoscalerTest, WithinToleranceNothingChanges) {
  for (int t = 0; t <= 100; t += 5) EXPECT_EQ(At(t, 2, 0.53).replicas, 2);
  EXPECT_EQ(At(105, 2, 0.53).reason, "WithinTolerance");
}

TEST_F(AutoscalerTest, SustainedHighScalesUpAfterTheWindowAndThenCoolsDown) {
  EXPECT_EQ(At(0, 1, 0.9).reason, "Stabilizing");  // a burst: not yet
  EXPECT_EQ(At(5, 1, 0.9).replicas, 1);
  ScaleDecision d = At(10, 1, 0.9);  // high for the whole up window
  EXPECT_EQ(d.reason, "ScaleUp");
  EXPECT_EQ(d.replicas, 2);
  // Still high on 2 (a new size is judged afresh, and the cooldown holds it).
  EXPECT_EQ(At(15, 2, 0.9).replicas, 2);
  EXPECT_EQ(At(25, 2, 0.9).reason, "Cooldown");
  EXPECT_EQ(At(40, 2, 0.9).replicas, 4);  // ceil(2 * 0.9 / 0.5) = 4, step 2
}

TEST_F(AutoscalerTest, ABurstBetweenLowsDoesNotScaleUp) {
  At(0, 1, 0.9);
  At(5, 1, 0.1);  // the lowest recommendation over the window is 1
  EXPECT_EQ(At(10, 1, 0.9).replicas, 1);
}

TEST_F(AutoscalerTest, ScaleDownNeedsTheWholeDownWindowAndGoesOneAtATime) {
  for (int t = 0; t < 60; t += 5) EXPECT_EQ(At(t, 3, 0.05).replicas, 3) << t;
  ScaleDecision d = At(60, 3, 0.05);
  EXPECT_EQ(d.reason, "ScaleDown");
  EXPECT_EQ(d.replicas, 2);
}

TEST_F(AutoscalerTest, OneHighSampleHoldsTheScaleDown) {
  for (int t = 0; t < 60; t += 5) At(t, 3, t == 30 ? 0.9 : 0.05);
  EXPECT_EQ(At(60, 3, 0.05).replicas, 3);  // the highest recommendation in the window is 4
}

TEST_F(AutoscalerTest, NoMetricsChangesNothing) {
  EXPECT_EQ(At(0, 2, std::nullopt).reason, "NoMetrics");
  EXPECT_TRUE(state_.recommendations.empty());
}

TEST_F(AutoscalerTest, OutOfBoundsIsCorrectedAtOnce) {
  EXPECT_EQ(At(0, 6, 0.5).replicas, 4);
  AutoscalerState fresh;
  EXPECT_EQ(Recommend(options_, fresh, kT0, 0, 0.5, 0.5, Bounds{1, 4}).replicas, 1);
}

}  // namespace
}  // namespace moe::op
