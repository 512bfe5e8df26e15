#include "services/gateway/core/rate_limiter.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moe::gateway {

RateLimiter::RateLimiter(double rate_per_s, double burst, common::Clock& clock, size_t max_keys)
    : rate_per_s_(rate_per_s),
      burst_(std::max(1.0, burst)),
      clock_(clock),
      max_keys_(std::max<size_t>(2, max_keys)) {}

absl::Duration RateLimiter::TryAcquire(const std::string& key) {
  return TryAcquire(key, rate_per_s_, burst_);
}

absl::Duration RateLimiter::TryAcquire(const std::string& key, double rate_per_s, double burst) {
  if (rate_per_s <= 0) return absl::ZeroDuration();
  burst = std::max(1.0, burst);
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_keys_) {
      const absl::Duration wait = EvictLocked(now);
      if (buckets_.size() >= max_keys_) return wait;
    }
    it = buckets_.emplace(key, Bucket{burst, now, rate_per_s, burst}).first;
  }
  Bucket& b = it->second;
  b.rate_per_s = rate_per_s;  // a reloaded key file may change them
  b.burst = burst;
  const double elapsed_s = std::max(0.0, absl::ToDoubleSeconds(now - b.last));
  b.tokens = std::min(burst, b.tokens + elapsed_s * rate_per_s);
  b.last = now;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return absl::ZeroDuration();
  }
  return absl::Seconds((1.0 - b.tokens) / rate_per_s);
}

size_t RateLimiter::num_keys() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

absl::Duration RateLimiter::EvictLocked(absl::Time now) {
  absl::Duration soonest = absl::InfiniteDuration();
  absl::erase_if(buckets_, [&](const auto& kv) {
    const Bucket& b = kv.second;
    const double full_at_s = (b.burst - b.tokens) / b.rate_per_s;
    const absl::Duration left = absl::Seconds(full_at_s) - (now - b.last);
    if (left <= absl::ZeroDuration()) return true;
    soonest = std::min(soonest, left);
    return false;
  });
  return soonest == absl::InfiniteDuration() ? absl::ZeroDuration() : soonest;
}

bool InFlightLimiter::TryAcquire() {
  int64_t cur = in_flight_.load();
  do {
    if (limit_ > 0 && cur >= limit_) return false;
  } while (!in_flight_.compare_exchange_weak(cur, cur + 1));
  return true;
}

void InFlightLimiter::Release() { in_flight_.fetch_sub(1); }

}  // namespace moe::gateway
