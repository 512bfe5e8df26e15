#include "services/operator/core/pool_plan.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "services/operator/core/topology.h"

namespace moe::op {
namespace {

// Two pools: "a" (autoscaled) and "b"; floor 1 each, so a's workers are ids 0, then 65537...
std::vector<PoolSpec> Pools(int a, int b) {
  PoolSpec pa{.name = "a", .replicas = a, .experts = {"*:0-3"}, .autoscaling = Bounds{1, 4}};
  PoolSpec pb{.name = "b", .replicas = b, .experts = {"*:4-7"}};
  return {pa, pb};
}

std::string Address(const std::string& pool, int ordinal) {
  return absl::StrCat("c-experts-", pool, "-", ordinal, ":50052");
}

// Pool `index` of `pools` with StatefulSet replicas `sts`, `ready` of its workers ready (the
// rest exist but are not ready, up to `exist`).
PoolObservation Observe(const std::vector<PoolSpec>& pools, size_t index, int sts, int exist,
                        int ready) {
  PoolObservation p;
  p.spec = pools[index];
  p.statefulset_replicas = sts;
  for (int j = 0; j < std::max(sts, p.spec.replicas); ++j) {
    WorkerObservation w;
    w.ordinal = j;
    w.id = WorkerId(pools, index, j);
    w.pod = absl::StrCat("c-experts-", p.spec.name, "-", j);
    w.exists = j < exist;
    w.ready = j < ready;
    w.address = w.exists ? Address(p.spec.name, j) : "";
    p.workers.push_back(w);
  }
  return p;
}

PlacementObservation Placed(const std::vector<std::pair<int32_t, std::string>>& workers) {
  PlacementObservation o;
  o.known = o.agreed = true;
  o.version = 1;
  for (const auto& [id, a] : workers) o.workers.push_back({id, a});
  return o;
}

// "a: ScalingUp sts=2 counted=1 ready=1 | b: Steady sts=1 counted=1 ready=1 | target=0,1"
std::string Render(const ClusterPlan& plan) {
  std::vector<std::string> parts;
  for (const auto& [name, p] : plan.pools) {
    parts.push_back(absl::StrCat(name, ": ", PoolPhaseName(p.phase),
                                 " sts=", p.statefulset_replicas, " counted=", p.counted,
                                 " ready=", p.ready));
  }
  if (plan.placement_target.has_value()) {
    std::vector<int32_t> ids;
    for (const auto& w : *plan.placement_target) ids.push_back(w.worker_id);
    parts.push_back("target=" + absl::StrJoin(ids, ","));
  }
  return absl::StrJoin(parts, " | ");
}

const int32_t kA1 = kExtraWorkerIdBase + 1;  // pool a, ordinal 1
const int32_t kA2 = kExtraWorkerIdBase + 2;

TEST(PoolPlanTest, NewClusterCreatesStatefulSetsAndWaits) {
  auto pools = Pools(2, 1);
  PoolObservation a = Observe(pools, 0, -1, 0, 0), b = Observe(pools, 1, -1, 0, 0);
  PlacementObservation unknown;
  unknown.error = "no router answered";
  auto plan = PlanPools({a, b}, unknown);
  EXPECT_EQ(Render(plan),
            "a: Waiting sts=2 counted=0 ready=0 | b: Waiting sts=1 counted=0 ready=0");
}

TEST(PoolPlanTest, ScaleUpGrowsWaitsForReadyThenPlacesThenCounts) {
  auto pools = Pools(3, 1);
  const auto v1 = Placed({{0, Address("a", 0)}, {1, Address("b", 0)}});
  // 1. The StatefulSet grows at once; placement unchanged.
  auto plan = PlanPools({Observe(pools, 0, 1, 1, 1), Observe(pools, 1, 1, 1, 1)}, v1);
  EXPECT_EQ(Render(plan),
            "a: ScalingUp sts=3 counted=1 ready=1 | b: Steady sts=1 counted=1 ready=1");
  // 2. One new worker ready, one not: still waiting, nothing placed on it.
  plan = PlanPools({Observe(pools, 0, 3, 3, 2), Observe(pools, 1, 1, 1, 1)}, v1);
  EXPECT_EQ(Render(plan),
            "a: ScalingUp sts=3 counted=1 ready=2 | b: Steady sts=1 counted=1 ready=1");
  // 3. Both ready: place onto every wanted worker (ids in order).
  plan = PlanPools({Observe(pools, 0, 3, 3, 3), Observe(pools, 1, 1, 1, 1)}, v1);
  EXPECT_EQ(Render(plan),
            absl::StrCat("a: Placing sts=3 counted=1 ready=3 | b: Steady sts=1 counted=1 ready=1 "
                         "| target=0,1,",
                         kA1, ",", kA2));
  // 4. Placed: they count.
  const auto v2 = Placed(
      {{0, Address("a", 0)}, {1, Address("b", 0)}, {kA1, Address("a", 1)}, {kA2, Address("a", 2)}});
  plan = PlanPools({Observe(pools, 0, 3, 3, 3), Observe(pools, 1, 1, 1, 1)}, v2);
  EXPECT_EQ(Render(plan), "a: Steady sts=3 counted=3 ready=3 | b: Steady sts=1 counted=1 ready=1");
  EXPECT_TRUE(plan.steady());
}

TEST(PoolPlanTest, ScaleDownPlacesAwayBeforeTheStatefulSetShrinks) {
  auto pools = Pools(1, 1);
  const auto v2 = Placed(
      {{0, Address("a", 0)}, {1, Address("b", 0)}, {kA1, Address("a", 1)}, {kA2, Address("a", 2)}});
  // 1. Placement moves off a-1 and a-2 first; the StatefulSet keeps them meanwhile.
  auto plan = PlanPools({Observe(pools, 0, 3, 3, 3), Observe(pools, 1, 1, 1, 1)}, v2);
  EXPECT_EQ(Render(plan),
            "a: Placing sts=3 counted=3 ready=3 | b: Steady sts=1 counted=1 ready=1 | target=0,1");
  // 2. Placed away (and drained: SetPlacement returned): now the StatefulSet shrinks.
  const auto v3 = Placed({{0, Address("a", 0)}, {1, Address("b", 0)}});
  plan = PlanPools({Observe(pools, 0, 3, 3, 3), Observe(pools, 1, 1, 1, 1)}, v3);
  EXPECT_EQ(Render(plan),
            "a: ScalingDown sts=1 counted=1 ready=3 | b: Steady sts=1 counted=1 ready=1");
  // 3. Gone.
  plan = PlanPools({Observe(pools, 0, 1, 1, 1), Observe(pools, 1, 1, 1, 1)}, v3);
  EXPECT_EQ(Render(plan), "a: Steady sts=1 counted=1 ready=1 | b: Steady sts=1 counted=1 ready=1");
}

TEST(PoolPlanTest, PlacedWorkerNotReadyStaysPlacedAndIsNotCounted) {
  auto pools = Pools(2, 1);
  const auto v = Placed({{0, Address("a", 0)}, {1, Address("b", 0)}, {kA1, Address("a", 1)}});
  // a-1 placed but not ready: routers route around it; no placement change, not counted.
  auto plan = PlanPools({Observe(pools, 0, 2, 2, 1), Observe(pools, 1, 1, 1, 1)}, v);
  EXPECT_EQ(Render(plan),
            "a: ScalingUp sts=2 counted=1 ready=1 | b: Steady sts=1 counted=1 ready=1");
  EXPECT_EQ(plan.pools["a"].placed_not_ready, 1);
}

TEST(PoolPlanTest, StaleObservationMovesNothing) {
  auto pools = Pools(3, 1);
  const auto v1 = Placed({{0, Address("a", 0)}, {1, Address("b", 0)}});
  PoolObservation a = Observe(pools, 0, 3, 3, 3);
  a.statefulset_current = false;  // its status predates its spec: ready counts are old news
  auto plan = PlanPools({a, Observe(pools, 1, 1, 1, 1)}, v1);
  EXPECT_EQ(Render(plan), "a: Waiting sts=3 counted=1 ready=3 | b: Steady sts=1 counted=1 ready=1");
  EXPECT_FALSE(plan.placement_target.has_value());
  // Unknown placement (a router did not answer GetStats): nothing moves, nothing shrinks.
  PlacementObservation unknown;
  plan = PlanPools({Observe(Pools(1, 1), 0, 3, 3, 3), Observe(pools, 1, 1, 1, 1)}, unknown);
  EXPECT_EQ(Render(plan),
            "a: Waiting sts=3 counted=0 ready=3 | b: Waiting sts=1 counted=0 ready=1");
}

TEST(PoolPlanTest, DivergedRoutersAreBroughtTogether) {
  auto pools = Pools(1, 1);
  auto v = Placed({{0, Address("a", 0)}, {1, Address("b", 0)}});
  v.agreed = false;  // a router restarted on version 0
  auto plan = PlanPools({Observe(pools, 0, 1, 1, 1), Observe(pools, 1, 1, 1, 1)}, v);
  EXPECT_EQ(Render(plan),
            "a: Steady sts=1 counted=1 ready=1 | b: Steady sts=1 counted=1 ready=1 | target=0,1");
}

TEST(PoolPlanTest, AWorkerAtANewAddressIsPlacedAgain) {
  auto pools = Pools(1, 1);
  const auto v = Placed({{0, "10.0.0.9:50052"}, {1, Address("b", 0)}});  // a-0's old pod IP
  auto plan = PlanPools({Observe(pools, 0, 1, 1, 1), Observe(pools, 1, 1, 1, 1)}, v);
  EXPECT_EQ(Render(plan),
            "a: Placing sts=1 counted=0 ready=1 | b: Steady sts=1 counted=1 ready=1 | target=0,1");
  EXPECT_EQ((*plan.placement_target)[0].address, Address("a", 0));
}

}  // namespace
}  // namespace moe::op
