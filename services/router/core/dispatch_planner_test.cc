#include "services/router/core/dispatch_planner.h"

#include "gtest/gtest.h"

namespace moe::router {
namespace {

PlacementTable Table() {
  PlacementTable t;
  t.num_layers = 1;
  t.num_experts = 3;
  t.workers = {{0, "a"}, {1, "b"}, {2, "c"}};
  t.replicas = {{0, 1}, {1}, {2, 0}};
  return t;
}

std::string Render(const DispatchPlan& p) {
  std::string s;
  for (const auto& [w, idx] : p.by_worker) {
    s += "w" + std::to_string(w) + ":";
    for (size_t i : idx) s += std::to_string(i);
    s += " ";
  }
  s += "x:";
  for (size_t i : p.unavailable) s += std::to_string(i);
  return s;
}

TEST(DispatchPlannerTest, PicksTheLeastLoadedReplica) {
  std::map<int32_t, ReplicaState> st = {
      {0, {true, 0.1, 100}}, {1, {true, 0.1, 0}}, {2, {true, 0.1, 0}}};
  const std::vector<DispatchBatch> batches = {{0, 4}, {2, 4}};
  const DispatchPlan p = PlanDispatch(
      Table(), 0, batches, [&](int32_t w) { return st[w]; }, 0.85, {}, 0);
  EXPECT_EQ(Render(p), "w1:0 w2:1 x:");
}

TEST(DispatchPlannerTest, SkipsReplicasAboveTheUtilisationThreshold) {
  std::map<int32_t, ReplicaState> st = {
      {0, {true, 0.1, 50}}, {1, {true, 0.9, 0}}, {2, {true, 0.95, 0}}};
  const std::vector<DispatchBatch> batches = {{0, 4}, {1, 1}};
  const DispatchPlan p = PlanDispatch(
      Table(), 0, batches, [&](int32_t w) { return st[w]; }, 0.85, {}, 0);
  // Expert 0 avoids the busy worker 1; expert 1 has only worker 1: it runs there anyway.
  EXPECT_EQ(Render(p), "w0:0 w1:1 x:");
}

TEST(DispatchPlannerTest, UnhealthyOrExcludedReplicasAreNotUsed) {
  std::map<int32_t, ReplicaState> st = {{0, {true, 0, 0}}, {1, {false, 0, 0}}, {2, {true, 0, 0}}};
  const std::vector<DispatchBatch> batches = {{0, 1}, {1, 1}, {2, 1}};
  const DispatchPlan p = PlanDispatch(
      Table(), 0, batches, [&](int32_t w) { return st[w]; }, 0.85, {2}, 0);
  EXPECT_EQ(Render(p), "w0:02 x:1");
}

TEST(DispatchPlannerTest, IdleReplicasShareWorkAcrossCalls) {
  const std::vector<DispatchBatch> batches = {{0, 1}};
  auto idle = [](int32_t) { return ReplicaState{}; };
  const DispatchPlan a = PlanDispatch(Table(), 0, batches, idle, 0.85, {}, 0);
  const DispatchPlan b = PlanDispatch(Table(), 0, batches, idle, 0.85, {}, 1);
  EXPECT_NE(a.by_worker.begin()->first, b.by_worker.begin()->first);
}

}  // namespace
}  // namespace moe::router
