// An in-memory KvTier for scheduler tests: blocks by hash (each "in" L2 or L3), a store queue of
// bounded capacity that lands at once, knobs for an unavailable tier, a fetch deadline that cuts
// a fetch short, and corrupt blocks. Several schedulers (routers) may share one.
//
// Thread-compatible: tests drive it from the stepping threads one at a time, or guard it.
#pragma once

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
  void Corrupt(const kv::BlockHash& hash) { corrupt_.insert(hash); }
  // Later fetches report the block as found in L3.
  void MoveToL3(const kv::BlockHash& hash) { in_l3_.insert(hash); }
  void Clear();

  bool Contains(const kv::BlockHash& hash) const { return blocks_.contains(hash); }
  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_stored() const { return num_stored_; }    // blocks queued by Store
  int64_t num_dropped() const { return num_dropped_; }  // blocks Store dropped
  int64_t num_fetched() const { return num_fetched_; }  // blocks delivered intact
  int64_t num_fetch_calls() const { return num_fetch_calls_; }
  int64_t num_response_lookups() const;
  int64_t num_responses() const;

  // KvTier
  bool enabled() const override { return true; }
  std::string_view fidelity() const override { return fidelity_; }
  int64_t block_bytes() const override { return block_bytes_; }
  void Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer) override;
  int64_t Store(const kv::BlockHash& shard_key, std::span<const kv::BlockHash> hashes,
                absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) override;
  bool response_cache_enabled() const override { return response_cache_; }
  std::optional<CachedResponse> LookupResponse(const kv::BlockHash& key) override;
  void StoreResponse(const kv::BlockHash& key, const CachedResponse& response) override;

 private:
  const int64_t block_bytes_;
  bool available_ = true;
  int64_t store_capacity_ = -1;
  int64_t max_fetch_blocks_ = -1;
  bool response_cache_ = false;
  std::string fidelity_ = "exact";
  absl::flat_hash_map<kv::BlockHash, std::string> blocks_;
  absl::flat_hash_set<kv::BlockHash> corrupt_;
  absl::flat_hash_set<kv::BlockHash> in_l3_;
  int64_t num_stored_ = 0, num_dropped_ = 0, num_fetched_ = 0, num_fetch_calls_ = 0;

  // Responses are looked up from Submit (any thread).
  mutable absl::Mutex mu_;
  absl::flat_hash_map<kv::BlockHash, CachedResponse> responses_ ABSL_GUARDED_BY(mu_);
  int64_t num_response_lookups_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moe::router::testing
