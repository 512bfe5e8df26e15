#include "common/kv/eviction_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::kv {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(LruEvictionPolicyTest, EvictsLeastRecentlyAddedFirst) {
  LruEvictionPolicy lru(8);
  lru.Add(5);
  lru.Add(2);
  lru.Add(7);
  EXPECT_THAT(lru.EvictionOrder(), ElementsAre(5, 2, 7));
  EXPECT_EQ(lru.Evict(), 5);
  EXPECT_EQ(lru.Evict(), 2);
  EXPECT_EQ(lru.Size(), 1);
  EXPECT_EQ(lru.Evict(), 7);
  EXPECT_EQ(lru.Size(), 0);
  EXPECT_THAT(lru.EvictionOrder(), IsEmpty());
}

TEST(LruEvictionPolicyTest, RemovedBlockIsSkippedAndReAddedBlockBecomesNewest) {
  LruEvictionPolicy lru(4);
  lru.Add(0);
  lru.Add(1);
  lru.Add(2);
  lru.Remove(1);
  EXPECT_FALSE(lru.Contains(1));
  EXPECT_TRUE(lru.Contains(0));
  lru.Remove(0);
  lru.Add(0);  // released again later: now the most recent
  lru.Add(1);
  EXPECT_THAT(lru.EvictionOrder(), ElementsAre(2, 0, 1));
  EXPECT_EQ(lru.Evict(), 2);
}

TEST(LruEvictionPolicyTest, ContainsRejectsOutOfRangeIds) {
  LruEvictionPolicy lru(2);
  EXPECT_FALSE(lru.Contains(-1));
  EXPECT_FALSE(lru.Contains(2));
  lru.Add(1);
  EXPECT_TRUE(lru.Contains(1));
}

TEST(LruEvictionPolicyTest, FactoryBuildsLru) {
  auto p = MakeEvictionPolicy(EvictionPolicyKind::kLru, 3);
  ASSERT_NE(p, nullptr);
  p->Add(2);
  p->Add(0);
  EXPECT_EQ(p->Evict(), 2);
}

}  // namespace
}  // namespace moe::kv
