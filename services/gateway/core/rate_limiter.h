// Per-key token-bucket rate limiting (429 + Retry-After) and a bound on requests in flight
// (503 + Retry-After). DESIGN.md §3: every queue is bounded; overload is 429/503, never
// unbounded memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"

namespace moe::gateway {

// A token bucket per key: `rate_per_s` tokens refill per second up to `burst`; each request
// takes one. Memory is bounded by max_keys buckets. When the table is full, only buckets that
// have refilled completely are forgotten (they carry no state: a new bucket starts full); if
// none has, a new key is refused until one has, so a flood of new client addresses can neither
// grow memory nor reset the limits of the clients already known.
//
// Thread-safe. The clock must outlive the limiter.
class RateLimiter {
 public:
  // rate_per_s <= 0 disables limiting (TryAcquire always succeeds).
  RateLimiter(double rate_per_s, double burst, common::Clock& clock, size_t max_keys = 100'000);

  // Takes one token for `key`. Returns absl::ZeroDuration() when allowed, else how long until
  // a token is available (> 0); nothing is taken then.
  absl::Duration TryAcquire(const std::string& key);
  // The same with the key's own rate and burst (an API key's limits); rate_per_s <= 0: no limit.
  absl::Duration TryAcquire(const std::string& key, double rate_per_s, double burst);

  bool enabled() const { return rate_per_s_ > 0; }
  size_t num_keys() const;

 private:
  struct Bucket {
    double tokens = 0;
    absl::Time last;
    double rate_per_s = 0;
    double burst = 1;
  };
  // Drops the buckets that refilled; returns how long until one will have, when none did.
  absl::Duration EvictLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const double rate_per_s_;
  const double burst_;
  common::Clock& clock_;
  const size_t max_keys_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Bucket> buckets_ ABSL_GUARDED_BY(mu_);
};

// Counts requests in flight against a limit. Thread-safe.
class InFlightLimiter {
 public:
  // limit <= 0: unlimited.
  explicit InFlightLimiter(int64_t limit) : limit_(limit) {}

  // Takes a slot; false when `limit` are in use.
  bool TryAcquire();
  void Release();
  int64_t in_flight() const { return in_flight_.load(); }
  int64_t limit() const { return limit_; }

 private:
  const int64_t limit_;
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace moe::gateway
