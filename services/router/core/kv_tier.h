// The router's seam to the KV tiers below its own L1 pool (DESIGN.md §2): the kv-store's L2
// (host memory) and L3 (SSD), shared by every router, and the exact response cache kept there.
// The scheduler fetches a prompt's further prefix through it on an L1 miss, stores the blocks it
// computes, and asks it for finished responses of deterministic requests.
//
// Implementations: KvStoreClient (gRPC, services/router/kv_store_client.h), NoKvTier (below: no
// tier, everything misses), testing/fake_kv_tier.h (in memory, for scheduler tests).
//
// Failure semantics (every implementation): a slow, dead or restarting tier means misses, never
// an error. Fetch returns by its deadline whatever arrived intact; Store never blocks (a full
// queue drops and counts); LookupResponse returns nullopt on any failure.
//
// Threading: Fetch runs on the scheduler's fetch threads (kv_fetcher.h), several at once, while
// the stepping thread calls Store; LookupResponse and StoreResponse run on any thread (Submit
// and the stepping thread). Every implementation is thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/engine/sampler.h"
#include "common/generation/finish_reason.h"
#include "common/kv/block_hash.h"

namespace moe::router {

// One sequence's part of a Fetch. Plain data.
struct KvFetch {
  // Picks the kv-store replica that holds the sequence's chain: the hash of its first block.
  kv::BlockHash shard_key;
  // The blocks to try, in chain order; hashes[0]'s parent is the last block L1 had.
  std::span<const kv::BlockHash> hashes;
  // Out: the leading blocks written through the writer and verified (checksum, shape), and of
  // those, how many came from L2 (the rest from L3 or the tier's own queue).
  int64_t num_fetched = 0;
  int64_t num_from_l2 = 0;
};

// Where a fetched block's bytes go (the scheduler's adapter over ModelRunner::WriteKvBlock,
// kv_fetcher.h). Called on the thread that runs Fetch; one fetch's writes never overlap.
class KvBlockWriter {
 public:
  virtual ~KvBlockWriter() = default;
  // Bytes [offset, offset + bytes.size()) of block `block` of fetch `fetch`. A block's bytes
  // arrive in order; a block that then fails its checks is simply not counted in num_fetched
  // (its L1 page is never registered, and gets recomputed).
  virtual void Write(size_t fetch, size_t block, int64_t offset,
                     std::span<const uint8_t> bytes) = 0;
};

// A finished deterministic response, as the response cache keeps it.
struct CachedResponse {
  std::vector<int32_t> token_ids;
  std::vector<engine::SampledToken> logprobs;  // parallel to token_ids when asked, else empty
  generation::FinishReason finish_reason = generation::FinishReason::kNone;  // kStop | kLength
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

class KvTier {
 public:
  virtual ~KvTier() = default;

  // Whether the tier is there at all (false: NoKvTier; the scheduler then skips the work).
  virtual bool enabled() const = 0;
  // "exact" or "int8": the KV fidelity this router expects (block_hash.h's numerics kv= part).
  virtual std::string_view fidelity() const = 0;
  // Bytes of one block ([num_layers, 2, block_size, num_kv_heads, head_dim] f32).
  virtual int64_t block_bytes() const = 0;

  // The least time the scheduler gives one sequence's fetch (kv_store.fetch_timeout): its
  // per-sequence fetch deadline is this, or longer when the prefill it saves is (scheduler.h).
  virtual absl::Duration fetch_timeout() const = 0;

  // For each fetch, the longest prefix of its hashes the tier holds, written through `writer`
  // on this thread; returns within `timeout` (what arrived intact by then counts). Blocking:
  // the scheduler calls it on its fetch threads, never on the stepping one.
  virtual void Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer, absl::Duration timeout) = 0;

  // Queues the leading blocks of `hashes` that fit the bounded store queue; `read(i, dst)`
  // copies block i's bytes (block_bytes()) into `dst`, on this thread, only for queued blocks.
  // Returns how many leading blocks it is done with: queued, or dropped for good (the tier is
  // down); the others (the queue was full) are dropped, counted, and may be offered again later.
  // Never blocks.
  virtual int64_t Store(const kv::BlockHash& shard_key, std::span<const kv::BlockHash> hashes,
                        absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) = 0;

  // The response cache (off unless configured): whether it is on, a lookup (nullopt on a miss
  // or any failure, by the tier's deadline), and an asynchronous store.
  virtual bool response_cache_enabled() const = 0;
  virtual std::optional<CachedResponse> LookupResponse(const kv::BlockHash& key) = 0;
  virtual void StoreResponse(const kv::BlockHash& key, const CachedResponse& response) = 0;

  // The scheduler says whether the engine has sequences (on each change, from the stepping
  // thread): a tier may hold its write-behind back while requests run. Default: ignored.
  virtual void SetEngineBusy(bool busy) { (void)busy; }
};

// No tier below L1: disabled, every lookup misses.
class NoKvTier final : public KvTier {
 public:
  // KvTier
  bool enabled() const override { return false; }
  std::string_view fidelity() const override { return "exact"; }
  int64_t block_bytes() const override { return 0; }
  absl::Duration fetch_timeout() const override { return absl::ZeroDuration(); }
  void Fetch(std::span<KvFetch>, KvBlockWriter&, absl::Duration) override {}
  int64_t Store(const kv::BlockHash&, std::span<const kv::BlockHash>,
                absl::FunctionRef<void(size_t, std::span<uint8_t>)>) override {
    return 0;
  }
  bool response_cache_enabled() const override { return false; }
  std::optional<CachedResponse> LookupResponse(const kv::BlockHash&) override {
    return std::nullopt;
  }
  void StoreResponse(const kv::BlockHash&, const CachedResponse&) override {}
};

}  // namespace moe::router
