#include "common/kv/eviction_policy.h"

#include "common/testing/fake_clock.h"
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

TEST(LruEvictionPolicyTest, GrowsToIdsBeyondItsInitialSize) {
  LruEvictionPolicy lru;  // the kv-store adds slot ids as it stores entries
  lru.Add(1000);
  lru.Add(3);
  lru.Add(70000);
  EXPECT_THAT(lru.EvictionOrder(), ElementsAre(1000, 3, 70000));
  EXPECT_FALSE(lru.Contains(999));
  EXPECT_EQ(lru.EvictVictim(), (Victim{1000, EvictionReason::kLru}));
}

TEST(LruEvictionPolicyTest, AHitMakesAnEntryTheNewestAndAMissDoesNot) {
  LruEvictionPolicy lru;
  lru.Add(0);
  lru.Add(1);
  lru.Add(2);
  lru.RecordLookup(0, /*hit=*/true);
  lru.RecordLookup(1, /*hit=*/false);
  EXPECT_THAT(lru.EvictionOrder(), ElementsAre(1, 2, 0));
  EXPECT_THAT(lru.TakeQualifying(10), IsEmpty());  // LRU never evicts on its own
  EXPECT_EQ(lru.Evict(), 1);
}

TEST(LruEvictionPolicyTest, FactoryBuildsLru) {
  auto p = MakeEvictionPolicy(EvictionPolicyKind::kLru, 3);
  ASSERT_NE(p, nullptr);
  p->Add(2);
  p->Add(0);
  EXPECT_EQ(p->Evict(), 2);
}

// ---------------------------------------------------------------------------------------------
// The threshold policy, case by case on a fake clock: min_hit_rate 0.6, min_idle 2 h,
// protect_hits 5, window 24 h (the defaults).

class ThresholdEvictionPolicyTest : public ::testing::Test {
 protected:
  ThresholdEvictionPolicyTest() : policy_(ThresholdPolicyOptions{}, clock_) {}
  // `lookups` lookups reached `id`, the first `hits` of them hits, spaced 1 s apart.
  void Use(int32_t id, int lookups, int hits) {
    for (int i = 0; i < lookups; ++i) {
      policy_.RecordLookup(id, i < hits);
      clock_.Advance(absl::Seconds(1));
    }
  }
  common::testing::FakeClock clock_;
  ThresholdEvictionPolicy policy_;
};

TEST_F(ThresholdEvictionPolicyTest, DefaultsAreTheIssuesNumbers) {
  const ThresholdPolicyOptions o;
  EXPECT_EQ(o.min_hit_rate, 0.6);
  EXPECT_EQ(o.min_idle, absl::Hours(2));
  EXPECT_EQ(o.protect_hits, 5);
  EXPECT_EQ(o.window, absl::Hours(24));
  EXPECT_TRUE(o.Validate().ok());
}

TEST_F(ThresholdEvictionPolicyTest, LowHitRateIdleEntryQualifiesOnlyAfterTheIdleTime) {
  policy_.Add(1);
  Use(1, 10, 2);  // 20%
  EXPECT_FALSE(policy_.Qualifies(1));
  clock_.Advance(absl::Hours(2));  // its last use (the 2nd hit) is now 2 h 9 s ago
  EXPECT_TRUE(policy_.Qualifies(1));
  policy_.Add(2);
  Use(2, 10, 2);
  clock_.Advance(absl::Hours(2) - absl::Seconds(9));  // exactly 2 h since its last hit
  EXPECT_FALSE(policy_.Qualifies(2));
  clock_.Advance(absl::Seconds(1));
  EXPECT_TRUE(policy_.Qualifies(2));
}

TEST_F(ThresholdEvictionPolicyTest, HitRateAtOrAboveTheFloorDoesNotQualify) {
  policy_.Add(1);
  Use(1, 10, 6);  // 60%: not below
  policy_.Add(2);
  Use(2, 10, 4);  // 40% (and too few hits to be protected)
  clock_.Advance(absl::Hours(3));
  EXPECT_FALSE(policy_.Qualifies(1));
  EXPECT_TRUE(policy_.Qualifies(2));
  EXPECT_EQ(policy_.lookups(2), 10);
  EXPECT_EQ(policy_.hits(2), 4);
}

TEST_F(ThresholdEvictionPolicyTest, NeverLookedUpCountsAsZeroHitRate) {
  policy_.Add(1);
  clock_.Advance(absl::Hours(2) + absl::Seconds(1));
  EXPECT_TRUE(policy_.Qualifies(1));
}

TEST_F(ThresholdEvictionPolicyTest, FiveHitsWithinTheWindowProtect) {
  policy_.Add(1);
  Use(1, 20, 5);  // 25%, but 5 hits in the last 24 h
  clock_.Advance(absl::Hours(3));
  EXPECT_FALSE(policy_.Qualifies(1));
  clock_.Advance(absl::Hours(21));  // the oldest of the 5 hits leaves the window
  EXPECT_TRUE(policy_.Qualifies(1));
  policy_.Add(2);
  Use(2, 20, 4);  // 4 recent hits do not protect
  clock_.Advance(absl::Hours(3));
  EXPECT_TRUE(policy_.Qualifies(2));
}

TEST_F(ThresholdEvictionPolicyTest, OnlyTheLastFiveHitsCountForProtection) {
  policy_.Add(1);
  Use(1, 5, 5);  // 5 hits...
  clock_.Advance(absl::Hours(23));
  policy_.RecordLookup(1, true);  // ...and a 6th 23 h later: the window holds 1 of the last 5
  for (int i = 0; i < 30; ++i) policy_.RecordLookup(1, false);  // rate 6/36
  clock_.Advance(absl::Hours(2) + absl::Seconds(1));
  EXPECT_TRUE(policy_.Qualifies(1));
}

TEST_F(ThresholdEvictionPolicyTest, EvictsAQualifyingEntryBeforeTheLruOne) {
  policy_.Add(1);  // LRU-oldest, but hit often
  Use(1, 10, 10);
  policy_.Add(2);  // cold
  policy_.Add(3);
  Use(3, 10, 9);
  clock_.Advance(absl::Hours(3));
  // By last use: 1 (its last hit), 2 (added after it), 3.
  EXPECT_THAT(policy_.EvictionOrder(), ElementsAre(1, 2, 3));
  EXPECT_EQ(policy_.EvictVictim(), (Victim{2, EvictionReason::kThreshold}));
  EXPECT_EQ(policy_.EvictVictim(), (Victim{1, EvictionReason::kLru}));
  EXPECT_EQ(policy_.Size(), 1);
}

TEST_F(ThresholdEvictionPolicyTest, FallsBackToLruWhenNothingQualifies) {
  policy_.Add(1);
  policy_.Add(2);
  clock_.Advance(absl::Hours(1));  // not idle long enough
  EXPECT_EQ(policy_.EvictVictim(), (Victim{1, EvictionReason::kLru}));
  EXPECT_EQ(policy_.EvictVictim(), (Victim{2, EvictionReason::kLru}));
}

TEST_F(ThresholdEvictionPolicyTest, TakeQualifyingSweepsColdEntriesOnly) {
  for (int32_t id : {4, 5, 6}) policy_.Add(id);
  Use(5, 10, 10);
  clock_.Advance(absl::Hours(2) + absl::Minutes(1));
  EXPECT_THAT(policy_.TakeQualifying(10), ElementsAre(Victim{4, EvictionReason::kThreshold},
                                                      Victim{6, EvictionReason::kThreshold}));
  EXPECT_THAT(policy_.EvictionOrder(), ElementsAre(5));
  EXPECT_THAT(policy_.TakeQualifying(10), IsEmpty());
}

TEST_F(ThresholdEvictionPolicyTest, ReAddedEntryStartsAfresh) {
  policy_.Add(1);
  Use(1, 10, 10);
  policy_.Remove(1);
  policy_.Add(1);
  EXPECT_EQ(policy_.lookups(1), 0);
  EXPECT_EQ(policy_.hits(1), 0);
}

TEST_F(ThresholdEvictionPolicyTest, EveryNumberIsConfigurable) {
  const ThresholdPolicyOptions o{.min_hit_rate = 0.9,
                                 .min_idle = absl::Minutes(5),
                                 .protect_hits = 2,
                                 .window = absl::Minutes(30)};
  ThresholdEvictionPolicy p(o, clock_);
  p.Add(1);
  for (int i = 0; i < 10; ++i) p.RecordLookup(1, i < 8);  // 80% < 90%
  clock_.Advance(absl::Minutes(6));
  EXPECT_FALSE(p.Qualifies(1));  // 2 hits within 30 min
  clock_.Advance(absl::Minutes(25));
  EXPECT_TRUE(p.Qualifies(1));
}

}  // namespace
}  // namespace moe::kv
