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
  if (rate_per_s_ <= 0) return absl::ZeroDuration();
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  auto it = buckets_.find(key);
  if (it == buckets_.end()) {
    if (buckets_.size() >= max_keys_) EvictLocked(now);
    it = buckets_.emplace(key, Bucket{burst_, now}).first;
  }
  Bucket& b = it->second;
  const double elapsed_s = std::max(0.0, absl::ToDoubleSeconds(now - b.last));
  b.tokens = std::min(burst_, b.tokens + elapsed_s * rate_per_s_);
  b.last = now;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return absl::ZeroDuration();
  }
  return absl::Seconds((1.0 - b.tokens) / rate_per_s_);
}

size_t RateLimiter::num_keys() const {
  absl::MutexLock lock(&mu_);
  return buckets_.size();
}

void RateLimiter::EvictLocked(absl::Time now) {
  // Full buckets carry no state; drop them first, then the stalest half.
  const absl::Duration refill = absl::Seconds(burst_ / rate_per_s_);
  absl::erase_if(buckets_, [&](const auto& kv) { return now - kv.second.last >= refill; });
  if (buckets_.size() < max_keys_) return;
  std::vector<absl::Time> times;
  times.reserve(buckets_.size());
  for (const auto& [key, b] : buckets_) times.push_back(b.last);
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  const absl::Time cutoff = times[times.size() / 2];
  absl::erase_if(buckets_, [&](const auto& kv) { return kv.second.last <= cutoff; });
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
