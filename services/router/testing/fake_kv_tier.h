// An in-memory KvTier for scheduler tests: blocks by hash (each "in" L2 or L3), a store queue of
// bounded capacity that lands at once, knobs for an unavailable tier, a fetch deadline that cuts
// a fetch short, corrupt blocks, and a latch that holds fetches part way (a slow tier, with no
// timing: the test decides when they go on). Several schedulers (routers) may share one.
//
// Thread-safe (fetches run on the schedulers' fetch threads while their stepping threads store).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "services/router/core/kv_tier.h"

namespace moe::router::testing {

class FakeKvTier final : public KvTier {
 public:
  explicit FakeKvTier(int64_t block_bytes) : block_bytes_(block_bytes) {}

  // Down: every fetch and lookup misses, every store is dropped.
  void set_available(bool available) { available_ = available; }
  // Blocks each Store call may queue (the rest are dropped); < 0 = unbounded.
  void set_store_capacity(int64_t blocks) { store_capacity_ = blocks; }
  // A fetch deadline that lets only this many blocks of each fetch arrive; < 0 = all.
  void set_max_fetch_blocks(int64_t blocks) { max_fetch_blocks_ = blocks; }
  void set_response_cache(bool on) { response_cache_ = on; }
  void set_fidelity(std::string f) { fidelity_ = std::move(f); }
  // The block arrives but fails verification (as a checksum mismatch would).
  void Corrupt(const kv::BlockHash& hash) ABSL_LOCKS_EXCLUDED(mu_);
  // Later fetches report the block as found in L3.
  void MoveToL3(const kv::BlockHash& hash) ABSL_LOCKS_EXCLUDED(mu_);
  void Clear() ABSL_LOCKS_EXCLUDED(mu_);

  // The latch: while held, each fetch delivers its first `after_blocks` blocks, then waits
  // (its timeout aside) until Release(); then it goes on, finding the tier as it is by then
  // (set_available(false) meanwhile: the tier died mid-fetch). Release() also lets through
  // every later fetch. WaitForHeld(n) blocks until n fetches are waiting at the latch.
  void Hold(int64_t after_blocks = 0) ABSL_LOCKS_EXCLUDED(mu_);
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  void WaitForHeld(int64_t n) ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until no Fetch call is running (every one has returned).
  void WaitForNoFetch() ABSL_LOCKS_EXCLUDED(mu_);
  void set_fetch_timeout(absl::Duration d) { fetch_timeout_ = d; }

  bool Contains(const kv::BlockHash& hash) const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t num_blocks() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t num_stored() const ABSL_LOCKS_EXCLUDED(mu_);   // blocks queued by Store
  int64_t num_dropped() const ABSL_LOCKS_EXCLUDED(mu_);  // blocks Store dropped
  int64_t num_fetched() const ABSL_LOCKS_EXCLUDED(mu_);  // blocks delivered intact
  int64_t num_fetch_calls() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t num_response_lookups() const;
  int64_t num_responses() const;
  // Every SetEngineBusy call, in order.
  std::vector<bool> engine_busy_calls() const ABSL_LOCKS_EXCLUDED(mu_);

  // KvTier
  bool enabled() const override { return true; }
  std::string_view fidelity() const override { return fidelity_; }
  int64_t block_bytes() const override { return block_bytes_; }
  absl::Duration fetch_timeout() const override { return fetch_timeout_; }
  void Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer, absl::Duration timeout) override;
  int64_t Store(const kv::BlockHash& shard_key, std::span<const kv::BlockHash> hashes,
                absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) override;
  bool response_cache_enabled() const override { return response_cache_; }
  std::optional<CachedResponse> LookupResponse(const kv::BlockHash& key) override;
  void StoreResponse(const kv::BlockHash& key, const CachedResponse& response) override;
  void SetEngineBusy(bool busy) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const int64_t block_bytes_;
  // Knobs: set between steps (the fetch threads read them).
  std::atomic<bool> available_ = true;
  std::atomic<int64_t> store_capacity_ = -1;
  std::atomic<int64_t> max_fetch_blocks_ = -1;
  std::atomic<bool> response_cache_ = false;
  std::string fidelity_ = "exact";
  absl::Duration fetch_timeout_ = absl::Seconds(60);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<kv::BlockHash, std::string> blocks_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<kv::BlockHash> corrupt_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<kv::BlockHash> in_l3_ ABSL_GUARDED_BY(mu_);
  int64_t num_stored_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_fetched_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_fetch_calls_ ABSL_GUARDED_BY(mu_) = 0;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t hold_after_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_held_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t num_active_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<kv::BlockHash, CachedResponse> responses_ ABSL_GUARDED_BY(mu_);
  int64_t num_response_lookups_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> engine_busy_calls_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::router::testing
