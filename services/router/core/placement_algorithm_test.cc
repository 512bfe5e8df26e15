#include "services/router/core/placement_algorithm.h"

#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::router {
namespace {

using common::testing::StatusIs;

// Tokens per expert following Zipf(s) over `n` experts (rank r gets weight r^-s), with the ranks
// shuffled over expert ids so the hot experts are not neighbours.
std::vector<double> ZipfLoad(int n, double s, double total, uint64_t seed) {
  std::vector<int> rank(n);
  std::iota(rank.begin(), rank.end(), 1);
  std::shuffle(rank.begin(), rank.end(), std::mt19937_64(seed));
  double norm = 0;
  for (int r = 1; r <= n; ++r) norm += std::pow(r, -s);
  std::vector<double> load(n);
  for (int e = 0; e < n; ++e) load[e] = std::round(total * std::pow(rank[e], -s) / norm);
  return load;
}

void ExpectValid(const LayerPlacement& p, int num_workers, int slots) {
  std::vector<int> used(num_workers, 0);
  for (size_t e = 0; e < p.size(); ++e) {
    ASSERT_FALSE(p[e].empty()) << "expert " << e;
    std::set<int32_t> distinct(p[e].begin(), p[e].end());
    EXPECT_EQ(distinct.size(), p[e].size()) << "expert " << e;
    for (int32_t w : p[e]) {
      ASSERT_GE(w, 0);
      ASSERT_LT(w, num_workers);
      ++used[w];
    }
  }
  for (int w = 0; w < num_workers; ++w) EXPECT_LE(used[w], slots) << "worker " << w;
}

TEST(PlacementAlgorithmTest, ZipfSimulationReachesBalancednessAboveNinetyPercent) {
  constexpr int kExperts = 256, kWorkers = 64, kSlots = 5;  // 4 + 1 redundant
  const std::vector<double> load = ZipfLoad(kExperts, 1.2, 1e6, 7);
  LayerPlacement before(kExperts);
  for (int e = 0; e < kExperts; ++e) before[e] = {e % kWorkers};
  const double b0 = Balancedness(ExpectedWorkerLoads(before, load, kWorkers));

  auto after = PlaceLayer(load, kWorkers, kSlots);
  ASSERT_OK(after.status());
  ExpectValid(*after, kWorkers, kSlots);
  const double b1 = Balancedness(ExpectedWorkerLoads(*after, load, kWorkers));
  RecordProperty("balancedness_before", std::to_string(b0));
  RecordProperty("balancedness_after", std::to_string(b1));
  EXPECT_LT(b0, 0.2);
  EXPECT_GE(b1, 0.9) << "before " << b0;
}

TEST(PlacementAlgorithmTest, HottestExpertGetsTheMostReplicas) {
  const std::vector<double> load = {100, 10, 10, 10};
  auto p = PlaceLayer(load, 4, 2);  // 4 redundant slots
  ASSERT_OK(p.status());
  ExpectValid(*p, 4, 2);
  EXPECT_EQ((*p)[0].size(), 4u);  // at most one replica per worker
  // The best possible: 25 per hot replica plus one cold expert on three of the workers.
  EXPECT_DOUBLE_EQ(Balancedness(ExpectedWorkerLoads(*p, load, 4)), 32.5 / 35);
}

TEST(PlacementAlgorithmTest, UniformLoadIsPerfectlyBalanced) {
  const std::vector<double> load(8, 5.0);
  auto p = PlaceLayer(load, 4, 2);
  ASSERT_OK(p.status());
  ExpectValid(*p, 4, 2);
  EXPECT_DOUBLE_EQ(Balancedness(ExpectedWorkerLoads(*p, load, 4)), 1.0);
}

TEST(PlacementAlgorithmTest, ColdExpertsAreNotReplicated) {
  const std::vector<double> load = {0, 0, 0, 9};
  auto p = PlaceLayer(load, 3, 3);
  ASSERT_OK(p.status());
  EXPECT_EQ((*p)[0].size(), 1u);
  EXPECT_EQ((*p)[3].size(), 3u);
}

TEST(PlacementAlgorithmTest, RejectsTooFewSlots) {
  EXPECT_THAT(PlaceLayer(std::vector<double>(9, 1.0), 4, 2),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(PlacementAlgorithmTest, BalancednessIsMeanOverMax) {
  EXPECT_DOUBLE_EQ(Balancedness(std::vector<double>{1, 2, 3}), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(Balancedness(std::vector<double>{0, 0}), 1.0);
}

TEST(PlacementAlgorithmTest, ComputePlacementKeepsWorkerIdsAndVersion) {
  model::ModelConfig config;
  config.num_hidden_layers = 2;
  config.num_experts = 4;
  config.num_experts_per_tok = 2;
  PlacementTable current;
  current.num_layers = 2;
  current.num_experts = 4;
  current.workers = {{10, "a:1"}, {20, "b:1"}};
  current.replicas.resize(8);
  for (int l = 0; l < 2; ++l) {
    for (int e = 0; e < 4; ++e) current.MutableReplicas(l, e) = {e < 2 ? 10 : 20};
  }
  ASSERT_OK(current.Validate(config));
  const std::vector<uint64_t> tokens = {90, 5, 3, 2, 10, 10, 10, 10};
  auto next = ComputePlacement(current, tokens, 3, 5);
  EXPECT_EQ(MaxExpertsPerWorker(current), 2);
  ASSERT_OK(next.status());
  EXPECT_EQ(next->version, 5u);
  ASSERT_OK(next->Validate(config));
  EXPECT_EQ(next->Replicas(0, 0), (std::vector<int32_t>{10, 20}));
  const std::vector<double> before = ExpectedBalancedness(current, tokens);
  const std::vector<double> after = ExpectedBalancedness(*next, tokens);
  EXPECT_LT(before[0], 0.6);
  EXPECT_GT(after[0], before[0]);
  EXPECT_DOUBLE_EQ(after[1], 1.0);
}

}  // namespace
}  // namespace moe::router
