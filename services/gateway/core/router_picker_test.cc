#include "services/gateway/core/router_picker.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

const std::vector<std::string> kRouters = {"r0", "r1", "r2", "r3"};

kv::BlockHash Root() {
  return kv::RootHash(kv::BlockHashRootKey{"tiny", 4, common::DType::kF32, ""});
}

std::vector<int32_t> Prompt(int32_t seed, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(seed * 1000 + i);
  return p;
}

TEST(RouterPickerTest, AffinityKeyDependsOnlyOnTheLeadingBlocks) {
  std::vector<int32_t> a = Prompt(1, 40), b = Prompt(1, 40);
  b[30] = 7;  // beyond 2 blocks of 4
  EXPECT_EQ(AffinityKey(Root(), a, 4, 2), AffinityKey(Root(), b, 4, 2));
  b[3] = 7;
  EXPECT_NE(AffinityKey(Root(), a, 4, 2), AffinityKey(Root(), b, 4, 2));
  // The key is the KV chain hash, the identity the routers' caches use.
  EXPECT_EQ(AffinityKey(Root(), a, 4, 2), kv::HashFullBlocks(Root(), a, 4)[1]);
}

TEST(RouterPickerTest, SamePrefixGoesToTheSameRouterWhenLoadsAreEqual) {
  std::vector<RouterLoad> loads(4);
  const kv::BlockHash key = AffinityKey(Root(), Prompt(5, 16), 4, 4);
  const int first = OrderRouters(key, kRouters, loads, {})[0];
  for (int i = 0; i < 10; ++i) EXPECT_EQ(OrderRouters(key, kRouters, loads, {})[0], first);
}

TEST(RouterPickerTest, PrefixesSpreadOverRouters) {
  std::vector<RouterLoad> loads(4);
  std::map<int, int> hits;
  for (int s = 0; s < 400; ++s) {
    ++hits[OrderRouters(AffinityKey(Root(), Prompt(s, 8), 4, 2), kRouters, loads, {})[0]];
  }
  ASSERT_EQ(hits.size(), 4u);
  for (const auto& [router, n] : hits) EXPECT_GT(n, 60) << router;
}

TEST(RouterPickerTest, RemovingARouterMovesOnlyItsPrefixes) {
  std::vector<RouterLoad> loads4(4), loads3(3);
  const std::vector<std::string> three = {"r0", "r1", "r3"};
  for (int s = 0; s < 200; ++s) {
    const kv::BlockHash key = AffinityKey(Root(), Prompt(s, 8), 4, 2);
    const std::string before = kRouters[OrderRouters(key, kRouters, loads4, {})[0]];
    const std::string after = three[OrderRouters(key, three, loads3, {})[0]];
    if (before != "r2") {
      EXPECT_EQ(before, after) << s;
    }
  }
}

TEST(RouterPickerTest, OverloadedPreferredRouterSpillsToTheNextInRendezvousOrder) {
  std::vector<RouterLoad> loads(4);
  const kv::BlockHash key = AffinityKey(Root(), Prompt(9, 16), 4, 4);
  const std::vector<int> order = OrderRouters(key, kRouters, loads, {});
  loads[order[0]].num_waiting = 16;  // load 2.0 vs 0 elsewhere, slack 0.5
  std::vector<int> spilled = OrderRouters(key, kRouters, loads, {});
  EXPECT_EQ(spilled[0], order[1]);
  EXPECT_THAT(spilled, ::testing::UnorderedElementsAreArray(order));
  // Within the slack, affinity wins.
  loads[order[0]].num_waiting = 2;  // load 0.25
  EXPECT_EQ(OrderRouters(key, kRouters, loads, {})[0], order[0]);
  // KV pressure counts too.
  loads[order[0]].num_waiting = 0;
  loads[order[0]].kv_usage_ratio = 0.9;
  EXPECT_EQ(OrderRouters(key, kRouters, loads, {})[0], order[1]);
}

TEST(RouterPickerTest, UnhealthyRoutersAreTriedLast) {
  std::vector<RouterLoad> loads(4);
  const kv::BlockHash key = AffinityKey(Root(), Prompt(3, 16), 4, 4);
  const std::vector<int> order = OrderRouters(key, kRouters, loads, {});
  loads[order[0]].healthy = false;
  std::vector<int> now = OrderRouters(key, kRouters, loads, {});
  EXPECT_EQ(now[0], order[1]);
  EXPECT_EQ(now.back(), order[0]);
}

}  // namespace
}  // namespace moe::gateway
