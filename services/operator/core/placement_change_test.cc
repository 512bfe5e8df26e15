#include "services/operator/core/placement_change.h"

#include <set>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::op {
namespace {

using common::testing::StatusIs;

// Two MoE layers of 4 experts, everything on worker 0.
router::ClusterLoad OneWorker(std::vector<uint64_t> tokens) {
  router::ClusterLoad load;
  router::PlacementTable& t = load.placement;
  t.version = 4;
  t.num_layers = 2;
  t.num_experts = 4;
  t.workers = {{0, "w0:1"}};
  t.replicas.assign(8, {0});
  load.expert_tokens = std::move(tokens);
  for (uint64_t x : load.expert_tokens) load.window_tokens += x;
  return load;
}

// Every (layer, expert) has a replica, and only on `ids`.
void ExpectEveryExpertOn(const router::PlacementTable& t, const std::set<int32_t>& ids) {
  for (int l = 0; l < t.num_layers; ++l) {
    for (int e = 0; e < t.num_experts; ++e) {
      ASSERT_FALSE(t.Replicas(l, e).empty()) << l << ":" << e;
      for (int32_t w : t.Replicas(l, e)) EXPECT_TRUE(ids.count(w)) << w;
    }
  }
}

TEST(PlacementChangeTest, OntoANewWorkerSplitsTheLoad) {
  const auto load = OneWorker({100, 100, 100, 100, 100, 100, 100, 100});
  ASSERT_OK_AND_ASSIGN(auto r, PlanPlacementChange(load, {{0, "w0:1"}, {65537, "w1:1"}}, 0));
  EXPECT_EQ(r.version, 5u);
  EXPECT_EQ(r.placement.workers.size(), 2u);
  ExpectEveryExpertOn(r.placement, {0, 65537});
  EXPECT_DOUBLE_EQ(r.balancedness_after[0], 1.0);
  EXPECT_GT(r.experts_loaded, 0);  // the new worker's replicas
}

TEST(PlacementChangeTest, AwayFromALeavingWorkerKeepsEveryExpert) {
  router::ClusterLoad load = OneWorker({5, 1, 1, 1, 5, 1, 1, 1});
  load.placement.workers = {{0, "w0:1"}, {65537, "w1:1"}};
  load.placement.replicas = {{0}, {65537}, {0}, {65537}, {0, 65537}, {65537}, {0}, {65537}};
  ASSERT_OK_AND_ASSIGN(auto r, PlanPlacementChange(load, {{0, "w0:1"}}, 0));
  ExpectEveryExpertOn(r.placement, {0});
  EXPECT_EQ(r.experts_unloaded, 5);  // everything w1 held
}

TEST(PlacementChangeTest, AnIdleWindowPlacesEvenly) {
  ASSERT_OK_AND_ASSIGN(auto r, PlanPlacementChange(OneWorker(std::vector<uint64_t>(8, 0)),
                                                   {{0, "w0:1"}, {65537, "w1:1"}}, 2));
  ExpectEveryExpertOn(r.placement, {0, 65537});
  EXPECT_EQ(r.slots_per_worker, 2);
}

TEST(PlacementChangeTest, NoWorkersIsRefused) {
  EXPECT_THAT(PlanPlacementChange(OneWorker(std::vector<uint64_t>(8, 1)), {}, 0),
              StatusIs(absl::StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace moe::op
