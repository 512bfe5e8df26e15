#include "services/operator/core/calibration.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/core/conditions.h"

namespace moe::op {
namespace {

absl::Time At(int d, int h, int m) {
  return absl::FromCivil(absl::CivilMinute(2026, 12, d, h, m), absl::UTCTimeZone());
}

CalibrationSpec OneShot() {
  CalibrationSpec c;
  c.name = "once";
  c.cluster = "prod";
  c.generation = 1;
  c.created = At(1, 10, 0);
  return c;
}

TEST(CalibrationTest, OneShotRunsUntilItHasAFinalPhase) {
  const CalibrationSpec c = OneShot();
  EXPECT_TRUE(IsCalibrationDue(c, Json::object(), At(1, 10, 0))->run);
  EXPECT_TRUE(IsCalibrationDue(c, R"({"phase": "Running"})"_json, At(1, 10, 0))->run);
  for (const char* done : {"Succeeded", "Failed", "Skipped"}) {
    EXPECT_FALSE(IsCalibrationDue(c, Json{{"phase", done}}, At(9, 0, 0))->run) << done;
  }
}

TEST(CalibrationTest, ScheduledRunsAtEachCronTime) {
  CalibrationSpec c = OneShot();
  c.scheduled = true;
  c.schedule = "0 3 * * *";
  auto due = IsCalibrationDue(c, Json::object(), At(2, 2, 59));
  EXPECT_FALSE(due->run);
  EXPECT_EQ(*due->next, At(2, 3, 0));
  due = IsCalibrationDue(c, Json::object(), At(2, 3, 0));
  EXPECT_TRUE(due->run);
  EXPECT_EQ(*due->next, At(3, 3, 0));
  // After the run at 03:00 on the 2nd, the next is the 3rd.
  const Json ran = {{"lastScheduleTime", Rfc3339(At(2, 3, 0))}};
  EXPECT_FALSE(IsCalibrationDue(c, ran, At(2, 12, 0))->run);
  EXPECT_TRUE(IsCalibrationDue(c, ran, At(3, 3, 1))->run);
  c.schedule = "not cron";
  EXPECT_FALSE(IsCalibrationDue(c, Json::object(), At(2, 3, 0)).ok());
}

TEST(CalibrationTest, StatusRecordsBeforeAfterAndConditions) {
  CalibrationSpec c = OneShot();
  CalibrationResult r;
  r.before = LoadSnapshot{.placement_version = 3,
                          .balancedness = 0.4,
                          .mean_balancedness = 0.5,
                          .window_tokens = 1000,
                          .measured = true};
  r.after = LoadSnapshot{.placement_version = 4, .balancedness = 0.9, .mean_balancedness = 0.95};
  router::RecalibrationReport report;
  report.balancedness_after = {1.0, 0.9, 0.95};
  r.report = report;
  r.routers = {"router-0", "router-1"};
  r.message = "placement v3 -> v4";
  Json s = CalibrationStatus(c, Json::object(), r, At(1, 10, 0), At(1, 10, 1), std::nullopt);
  EXPECT_EQ(s["phase"], "Succeeded");
  EXPECT_EQ(s["before"]["placementVersion"], 3);
  EXPECT_EQ(s["after"]["placementVersion"], 4);
  EXPECT_DOUBLE_EQ(s["before"]["balancedness"].get<double>(), 0.4);
  EXPECT_DOUBLE_EQ(s["expectedBalancedness"].get<double>(), 0.9);
  EXPECT_EQ(s["routers"][1]["name"], "router-1");
  EXPECT_EQ(s["routers"][1]["drained"], true);
  EXPECT_EQ(s["runs"], 1);
  EXPECT_EQ((*FindCondition(s["conditions"], "Complete"))["status"], "True");
  EXPECT_EQ((*FindCondition(s["conditions"], "Failed"))["status"], "False");
  r.phase = CalibrationResult::Phase::kFailed;
  s = CalibrationStatus(c, s, r, At(1, 11, 0), At(1, 11, 1), std::nullopt);
  EXPECT_EQ(s["runs"], 2);
  EXPECT_EQ((*FindCondition(s["conditions"], "Failed"))["status"], "True");
  EXPECT_EQ((*FindCondition(s["conditions"], "Failed"))["reason"], "RunFailed");
}

TEST(CalibrationTest, SnapshotIsTheWorstMoeLayerMeasured) {
  router::ClusterLoad load;
  load.placement.version = 2;
  load.placement.num_layers = 2;
  load.placement.num_experts = 2;
  load.placement.workers = {{0, "a"}, {1, "b"}};
  load.placement.replicas = {{0}, {1}, {0}, {1}};
  load.expert_tokens = {10, 10, 30, 10};
  load.window_tokens = 60;
  load.worker_tokens = {{0, {10, 30}}, {1, {10, 10}}};
  const LoadSnapshot s = SnapshotOf(load);
  EXPECT_TRUE(s.measured);
  EXPECT_EQ(s.placement_version, 2u);
  EXPECT_DOUBLE_EQ(s.balancedness, 20.0 / 30.0);
  EXPECT_DOUBLE_EQ(s.mean_balancedness, (1.0 + 20.0 / 30.0) / 2);
}

TEST(CalibrationTest, ThresholdPolicyBecomesCoordinatorOptions) {
  ClusterSpec c;
  c.recalibration.interval = absl::Seconds(5);
  c.recalibration.window = absl::Seconds(20);
  c.recalibration.imbalance_threshold = 0.7;
  c.recalibration.sustain = 2;
  c.recalibration.cooldown = absl::Seconds(40);
  c.slots_per_worker = 3;
  const auto o = CoordinatorOptions(c);
  EXPECT_EQ(o.interval, absl::Seconds(5));
  EXPECT_EQ(o.window, absl::Seconds(20));
  EXPECT_DOUBLE_EQ(o.threshold, 0.7);
  EXPECT_EQ(o.sustain, 2);
  EXPECT_EQ(o.cooldown, absl::Seconds(40));
  EXPECT_EQ(o.slots_per_worker, 3);
  EXPECT_TRUE(o.Validate().ok());
}

}  // namespace
}  // namespace moe::op
