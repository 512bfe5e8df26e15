// L1 KV block manager: block ids, reference counts, per-sequence block tables and automatic
// prefix caching. Pure bookkeeping: the engine owns the K/V memory (per layer
// [num_blocks, block_size, num_kv_heads, head_dim], kernels.h PagedKvLayout) and executes the
// CopyOps this class returns.
//
// Model. A sequence (SeqId chosen by the caller) holds `num_tokens` token ids, each with a slot
// (position p lives in block table[p / block_size], offset p % block_size). Of those, the first
// `num_computed_tokens` have K/V written by the engine; the caller advances that mark with
// MarkComputed() after each engine step. Every block is in exactly one state:
//   free    - reference count 0, holds nothing useful;
//   used    - referenced by >= 1 block table (count = number of tables that list it);
//   cached  - reference count 0 but registered in the prefix cache; evictable (EvictionPolicy).
//
// Prefix caching. When a full block is computed it is registered under its chain hash
// (block_hash.h, root from options.model_id/block_size/kv_dtype and the sequence's cache_salt),
// unless another block already holds that hash. Allocate() matches a new prompt block by block
// against registered blocks and reuses them (refcount++). The match never covers the whole
// prompt: only full blocks inside the first (prompt length - 1) tokens are eligible, so at
// least the last prompt token is always left to compute (its logits start decoding); when the
// prompt length is a multiple of block_size its whole last block is recomputed (as vLLM does).
// Blocks are registered only after MarkComputed(), so a block whose K/V was never written (a
// failed or cancelled step) is never offered to another request.
//
// Copy-on-write. Sharing a partial block happens only through Fork(). A sequence that appends
// into a partial block shared with others gets a private copy first: AppendTokens() returns
// {src, dst} copy ops which the caller must execute (copy every layer's K and V of block src to
// dst) before the next engine step writes into dst. Full blocks are never written again.
//
// Errors: NOT_FOUND (unknown sequence), ALREADY_EXISTS (sequence id in use), INVALID_ARGUMENT
// (bad argument), FAILED_PRECONDITION (Fork with uncomputed tokens), RESOURCE_EXHAUSTED (not
// enough free + evictable blocks). Every failing call leaves the state exactly as it was.
//
// Thread-compatibility: not thread-safe. Called only from the scheduler loop thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/ids.h"
#include "common/kv/block_hash.h"
#include "common/kv/block_manager_options.h"
#include "common/kv/eviction_policy.h"

namespace moe::kv {

using SeqId = common::SeqId;

// Copy all slots of block src to block dst, every layer, K and V.
struct CopyOp {
  int32_t src_block_id;
  int32_t dst_block_id;
  friend bool operator==(const CopyOp&, const CopyOp&) = default;
};

struct SequenceInfo {
  int64_t num_tokens = 0;           // tokens with a slot
  int64_t num_computed_tokens = 0;  // tokens whose K/V the engine has written
  int64_t num_cached_tokens = 0;    // prompt tokens served from the prefix cache at Allocate
  int64_t num_blocks = 0;           // block table length
};

// A snapshot. Block counts: num_blocks_used + num_blocks_cached + num_blocks_free ==
// num_blocks_total. Counters (prefix_*, num_evictions, num_cow_copies) are cumulative.
struct BlockManagerStats {
  int64_t num_blocks_total = 0;
  int64_t num_blocks_used = 0;
  int64_t num_blocks_cached = 0;
  int64_t num_blocks_free = 0;
  int64_t num_sequences = 0;
  // Filled slots of used blocks, each shared block counted once.
  int64_t num_tokens_stored = 0;
  // num_tokens_stored / (num_blocks_used x block_size); 0 when no block is used.
  double slot_utilisation = 0;
  // num_blocks_used / num_blocks_total (vllm:kv_cache_usage_perc, moe_kv_usage_ratio{tier="l1"}).
  double usage_ratio = 0;
  // Prefix-cache lookups by successful Allocate() calls, in blocks: eligible full prompt blocks
  // queried, and of those found (moe_prefix_cache_{queries,hits}_total{tier="l1"}).
  int64_t prefix_cache_queries = 0;
  int64_t prefix_cache_hits = 0;
  int64_t num_evictions = 0;   // cached blocks reclaimed for reuse
  int64_t num_cow_copies = 0;  // CopyOps returned
};

class BlockManager {
 public:
  // INVALID_ARGUMENT when options.Validate() fails. `eviction_policy` overrides
  // options.eviction_policy (tests inject fakes); it must be sized for the resolved pool.
  static absl::StatusOr<std::unique_ptr<BlockManager>> Create(
      const BlockManagerOptions& options,
      std::unique_ptr<EvictionPolicy> eviction_policy = nullptr);

  BlockManager(const BlockManager&) = delete;
  BlockManager& operator=(const BlockManager&) = delete;
  ~BlockManager();

  // Number of leading tokens of `prompt` that Allocate() would take from the prefix cache now
  // (a multiple of block_size, at most prompt.size() - 1; 0 with caching disabled). No side
  // effects, stats included.
  int64_t MatchPrefix(absl::Span<const int32_t> prompt, std::string_view cache_salt = "") const;

  // Creates sequence `seq` holding `prompt` with a slot for every token: matched prefix blocks
  // are shared, the rest freshly allocated (evicting cached blocks as needed). Returns the
  // number of prompt tokens already computed (MatchPrefix's answer), which is also the new
  // sequence's num_computed_tokens. Counts prefix queries and hits.
  // Errors: ALREADY_EXISTS, INVALID_ARGUMENT (empty prompt), RESOURCE_EXHAUSTED.
  absl::StatusOr<int64_t> Allocate(SeqId seq, absl::Span<const int32_t> prompt,
                                   std::string_view cache_salt = "");

  // Appends `token_ids` to `seq`, giving each a slot (allocating blocks as needed). Returns the
  // copy ops to run before the engine writes the new slots (non-empty only when the last block
  // was a partial block shared with another sequence). Empty `token_ids` is a no-op.
  // Errors: NOT_FOUND, RESOURCE_EXHAUSTED.
  absl::StatusOr<std::vector<CopyOp>> AppendTokens(SeqId seq, absl::Span<const int32_t> token_ids);

  // The engine has written K/V for the first `num_computed_tokens` tokens of `seq`. Newly
  // computed full blocks are hashed and (with caching on) registered in the prefix cache.
  // Errors: NOT_FOUND; INVALID_ARGUMENT unless
  // num_computed_tokens in [current num_computed_tokens, num_tokens].
  absl::Status MarkComputed(SeqId seq, int64_t num_computed_tokens);

  // Creates `child` as a copy of `parent` sharing all of its blocks (refcount++ each); the two
  // diverge through copy-on-write on their next appends. Needs no free block.
  // Errors: NOT_FOUND (parent), ALREADY_EXISTS (child), FAILED_PRECONDITION unless the parent is
  // fully computed (its slots would otherwise be written twice through one shared block).
  absl::Status Fork(SeqId parent, SeqId child);

  // Releases `seq` (finished, cancelled, failed or preempted): refcount-- on each block, last
  // block first. A block reaching 0 becomes cached if registered (tail blocks are released
  // first, so an LRU policy evicts a sequence's tail before its shared head), else free.
  // Errors: NOT_FOUND.
  absl::Status Free(SeqId seq);

  // Drops every cached (unreferenced) block from the prefix cache into the free list; returns
  // how many. Used blocks stay registered. For benchmarks' cold runs and model reloads.
  int64_t ResetPrefixCache();

  // The block table of `seq` (what kernels' AttentionToken::block_table points at). Valid until
  // the next non-const call on this manager. Errors: NOT_FOUND.
  absl::StatusOr<absl::Span<const int32_t>> BlockTable(SeqId seq) const;
  absl::StatusOr<SequenceInfo> GetSequenceInfo(SeqId seq) const;
  // Chain hashes of the computed full blocks of `seq` (num_computed_tokens / block_size of them),
  // the keys under which the L2/L3 tiers and the gateway know them. Valid like BlockTable().
  absl::StatusOr<absl::Span<const BlockHash>> ComputedBlockHashes(SeqId seq) const;
  bool HasSequence(SeqId seq) const;
  // The chain hashes of every full block of `tokens` under this manager's namespace with
  // `cache_salt` (what the blocks of a sequence holding those tokens are registered as once
  // computed): the keys the kv-store's tiers know them by. No side effects.
  std::vector<BlockHash> ChainHashes(absl::Span<const int32_t> tokens,
                                     std::string_view cache_salt = "") const;

  // Blocks that can still be handed out: free + cached.
  int64_t NumAvailableBlocks() const;
  // Blocks AppendTokens(seq, <n tokens>) would take now (copy-on-write included). NOT_FOUND.
  absl::StatusOr<int64_t> NumBlocksForAppend(SeqId seq, int64_t num_new_tokens) const;

  BlockManagerStats GetStats() const;
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return num_blocks_; }
  const BlockManagerOptions& options() const { return options_; }

  // One line per sequence (ascending id), then the cached blocks in eviction order and the free
  // blocks in ascending order, e.g.
  //   seq 1: 0* 1* 2 (tokens 40, computed 32, cached 16)
  //   cached: 4 5
  //   free: 3 6 7
  // `*` marks a block registered in the prefix cache. Tests assert on it.
  std::string DebugString() const;

  // Verifies every internal invariant (refcounts equal table references, each block in exactly
  // one state, index <-> block consistency, counters); INTERNAL with the first violation.
  // O(num_blocks + total table length).
  absl::Status CheckInvariants() const;
  int32_t RefCountForTesting(int32_t block_id) const;

 private:
  struct Block {
    int32_t ref_count = 0;
    int32_t num_filled = 0;   // slots holding a token
    bool registered = false;  // in prefix_index_ under `hash`
    BlockHash hash;
  };
  struct Sequence {
    std::vector<int32_t> token_ids;
    std::vector<int32_t> block_table;
    std::vector<BlockHash> block_hashes;  // of computed full blocks
    BlockHash root;
    int64_t num_computed = 0;
    int64_t num_cached = 0;
  };

  BlockManager(const BlockManagerOptions& options, std::unique_ptr<EvictionPolicy> policy);

  BlockHash RootFor(std::string_view cache_salt) const;
  // Number of leading eligible full blocks of `prompt` registered under the chain from `root`;
  // appends their hashes to `hashes` when given. 0 with caching disabled.
  int64_t MatchBlocks(const BlockHash& root, absl::Span<const int32_t> prompt,
                      std::vector<BlockHash>* hashes) const;
  // Pops a free block, else evicts a cached one. REQUIRES: NumAvailableBlocks() > 0.
  int32_t TakeBlock();
  void Acquire(int32_t block_id);  // refcount++ (reviving a cached block)
  void Release(int32_t block_id);  // refcount--
  void AppendToSequence(Sequence& s, absl::Span<const int32_t> token_ids);
  int64_t BlocksForAppend(const Sequence& s, int64_t num_new_tokens) const;

  // Constant after construction.
  const BlockManagerOptions options_;
  const int32_t block_size_;
  const int32_t num_blocks_;

  std::vector<Block> blocks_;
  std::vector<int32_t> free_list_;  // a stack: the top is reused first
  std::unique_ptr<EvictionPolicy> evictor_;
  absl::flat_hash_map<BlockHash, int32_t> prefix_index_;
  absl::node_hash_map<SeqId, Sequence> sequences_;

  int64_t num_used_ = 0;
  int64_t num_tokens_stored_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
  int64_t num_evictions_ = 0;
  int64_t num_cow_copies_ = 0;
};

}  // namespace moe::kv
