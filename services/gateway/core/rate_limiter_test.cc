#include "services/gateway/core/rate_limiter.h"

#include "common/testing/fake_clock.h"
#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

using common::testing::FakeClock;

TEST(RateLimiterTest, AllowsABurstThenRefusesWithTheWaitUntilTheNextToken) {
  FakeClock clock;
  RateLimiter limiter(/*rate_per_s=*/2, /*burst=*/3, clock);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.TryAcquire("k"), absl::ZeroDuration()) << i;
  EXPECT_EQ(limiter.TryAcquire("k"), absl::Milliseconds(500));
  clock.Advance(absl::Milliseconds(250));
  EXPECT_EQ(limiter.TryAcquire("k"), absl::Milliseconds(250));
  clock.Advance(absl::Milliseconds(250));
  EXPECT_EQ(limiter.TryAcquire("k"), absl::ZeroDuration());
}

TEST(RateLimiterTest, KeysHaveTheirOwnBuckets) {
  FakeClock clock;
  RateLimiter limiter(1, 1, clock);
  EXPECT_EQ(limiter.TryAcquire("a"), absl::ZeroDuration());
  EXPECT_GT(limiter.TryAcquire("a"), absl::ZeroDuration());
  EXPECT_EQ(limiter.TryAcquire("b"), absl::ZeroDuration());
}

TEST(RateLimiterTest, RefillNeverExceedsTheBurst) {
  FakeClock clock;
  RateLimiter limiter(10, 2, clock);
  clock.Advance(absl::Hours(1));
  EXPECT_EQ(limiter.TryAcquire("k"), absl::ZeroDuration());
  EXPECT_EQ(limiter.TryAcquire("k"), absl::ZeroDuration());
  EXPECT_GT(limiter.TryAcquire("k"), absl::ZeroDuration());
}

TEST(RateLimiterTest, DisabledWhenRateIsZero) {
  FakeClock clock;
  RateLimiter limiter(0, 1, clock);
  EXPECT_FALSE(limiter.enabled());
  for (int i = 0; i < 100; ++i) EXPECT_EQ(limiter.TryAcquire("k"), absl::ZeroDuration());
}

TEST(RateLimiterTest, KeyCountStaysBounded) {
  FakeClock clock;
  RateLimiter limiter(1, 5, clock, /*max_keys=*/8);
  for (int i = 0; i < 100; ++i) {
    limiter.TryAcquire("k" + std::to_string(i));
    clock.Advance(absl::Milliseconds(1));
  }
  EXPECT_LE(limiter.num_keys(), 8u);
}

// A flood of new addresses used to evict the stalest half of all buckets, resetting the limits
// of clients that had spent theirs. Now only refilled buckets go, and new keys wait.
TEST(RateLimiterTest, AFloodOfNewKeysCannotResetAKnownClientsLimit) {
  FakeClock clock;
  RateLimiter limiter(1, 2, clock, /*max_keys=*/4);
  EXPECT_EQ(limiter.TryAcquire("victim"), absl::ZeroDuration());
  EXPECT_EQ(limiter.TryAcquire("victim"), absl::ZeroDuration());
  EXPECT_GT(limiter.TryAcquire("victim"), absl::ZeroDuration());  // spent
  int refused = 0;
  for (int i = 0; i < 100; ++i) {
    if (limiter.TryAcquire("flood" + std::to_string(i)) > absl::ZeroDuration()) ++refused;
  }
  EXPECT_EQ(refused, 97);  // 3 slots were free; the rest wait
  EXPECT_GT(limiter.TryAcquire("victim"), absl::ZeroDuration());  // still spent
  EXPECT_LE(limiter.num_keys(), 4u);
  // Once buckets refill they carry no state and make room.
  clock.Advance(absl::Seconds(3));
  EXPECT_EQ(limiter.TryAcquire("late"), absl::ZeroDuration());
}

TEST(RateLimiterTest, PerKeyRatesAreTheKeys) {
  FakeClock clock;
  RateLimiter limiter(100, 100, clock);
  EXPECT_EQ(limiter.TryAcquire("slow", 1, 1), absl::ZeroDuration());
  EXPECT_EQ(limiter.TryAcquire("slow", 1, 1), absl::Seconds(1));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(limiter.TryAcquire("fast"), absl::ZeroDuration());
}

TEST(InFlightLimiterTest, BoundsConcurrentRequests) {
  InFlightLimiter limiter(2);
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_FALSE(limiter.TryAcquire());
  limiter.Release();
  EXPECT_TRUE(limiter.TryAcquire());
  EXPECT_EQ(limiter.in_flight(), 2);
}

}  // namespace
}  // namespace moe::gateway
