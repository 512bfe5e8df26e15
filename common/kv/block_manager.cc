#include "common/kv/block_manager.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/check.h"

namespace moe::kv {
namespace {

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

absl::StatusOr<std::unique_ptr<BlockManager>> BlockManager::Create(
    const BlockManagerOptions& options, std::unique_ptr<EvictionPolicy> eviction_policy) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (eviction_policy == nullptr) {
    eviction_policy = MakeEvictionPolicy(options.eviction_policy,
                                         static_cast<int32_t>(options.ResolvedNumBlocks()));
  }
  if (eviction_policy->Size() != 0) {
    return absl::InvalidArgumentError("the eviction policy must start empty");
  }
  return std::unique_ptr<BlockManager>(new BlockManager(options, std::move(eviction_policy)));
}

BlockManager::BlockManager(const BlockManagerOptions& options,
                           std::unique_ptr<EvictionPolicy> policy)
    : options_(options),
      block_size_(options.block_size),
      num_blocks_(static_cast<int32_t>(options.ResolvedNumBlocks())),
      blocks_(num_blocks_),
      evictor_(std::move(policy)) {
  // A stack whose top is block 0, so a fresh pool hands out 0, 1, 2, ...
  free_list_.reserve(num_blocks_);
  for (int32_t b = num_blocks_ - 1; b >= 0; --b) free_list_.push_back(b);
}

BlockManager::~BlockManager() = default;

BlockHash BlockManager::RootFor(std::string_view cache_salt) const {
  BlockHashRootKey key{options_.model_id, block_size_, options_.kv_dtype, std::string(cache_salt)};
  key.checkpoint_fingerprint = options_.checkpoint_fingerprint;
  key.numerics = options_.numerics;
  return RootHash(key);
}

int64_t BlockManager::MatchBlocks(const BlockHash& root, absl::Span<const int32_t> prompt,
                                  std::vector<BlockHash>* hashes) const {
  if (!options_.enable_prefix_caching || prompt.empty()) return 0;
  // Only blocks inside the first size-1 tokens: the last prompt token is always computed.
  const int64_t eligible = static_cast<int64_t>(prompt.size() - 1) / block_size_;
  BlockHash parent = root;
  int64_t hits = 0;
  // Hash lazily: a miss ends the chain, so the rest of a long prompt is never hashed here.
  for (; hits < eligible; ++hits) {
    const BlockHash h = HashBlock(parent, prompt.subspan(hits * block_size_, block_size_));
    if (!prefix_index_.contains(h)) break;
    if (hashes != nullptr) hashes->push_back(h);
    parent = h;
  }
  return hits;
}

std::vector<BlockHash> BlockManager::ChainHashes(absl::Span<const int32_t> tokens,
                                                 std::string_view cache_salt) const {
  return HashFullBlocks(RootFor(cache_salt), tokens, block_size_);
}

int64_t BlockManager::MatchPrefix(absl::Span<const int32_t> prompt,
                                  std::string_view cache_salt) const {
  return MatchBlocks(RootFor(cache_salt), prompt, nullptr) * block_size_;
}

int32_t BlockManager::TakeBlock() {
  int32_t b;
  if (!free_list_.empty()) {
    b = free_list_.back();
    free_list_.pop_back();
  } else {
    MOE_CHECK(evictor_->Size() > 0);
    b = evictor_->Evict();
    Block& victim = blocks_[b];
    MOE_DCHECK(victim.registered && victim.ref_count == 0);
    prefix_index_.erase(victim.hash);
    victim.registered = false;
    victim.num_filled = 0;
    ++num_evictions_;
  }
  blocks_[b].ref_count = 1;
  ++num_used_;
  return b;
}

void BlockManager::Acquire(int32_t block_id) {
  Block& blk = blocks_[block_id];
  if (blk.ref_count == 0) {
    // Only registered (cached) blocks are ever re-acquired by id; free ones come from TakeBlock.
    MOE_DCHECK(blk.registered);
    evictor_->Remove(block_id);
    ++num_used_;
    num_tokens_stored_ += blk.num_filled;
  }
  ++blk.ref_count;
}

void BlockManager::Release(int32_t block_id) {
  Block& blk = blocks_[block_id];
  MOE_DCHECK(blk.ref_count > 0);
  if (--blk.ref_count > 0) return;
  --num_used_;
  num_tokens_stored_ -= blk.num_filled;
  if (blk.registered) {
    evictor_->Add(block_id);
  } else {
    blk.num_filled = 0;
    free_list_.push_back(block_id);
  }
}

void BlockManager::AppendToSequence(Sequence& s, absl::Span<const int32_t> token_ids) {
  for (int32_t t : token_ids) {
    if (s.token_ids.size() % block_size_ == 0) s.block_table.push_back(TakeBlock());
    ++blocks_[s.block_table.back()].num_filled;
    s.token_ids.push_back(t);
  }
  num_tokens_stored_ += static_cast<int64_t>(token_ids.size());
}

int64_t BlockManager::BlocksForAppend(const Sequence& s, int64_t num_new_tokens) const {
  if (num_new_tokens <= 0) return 0;
  const int64_t n = static_cast<int64_t>(s.token_ids.size());
  int64_t need = CeilDiv(n + num_new_tokens, block_size_) - CeilDiv(n, block_size_);
  if (n % block_size_ != 0 && blocks_[s.block_table.back()].ref_count > 1) ++need;  // CoW
  return need;
}

absl::StatusOr<int64_t> BlockManager::Allocate(SeqId seq, absl::Span<const int32_t> prompt,
                                               std::string_view cache_salt) {
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  if (sequences_.contains(seq)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", seq.value(), " already allocated"));
  }
  Sequence s;
  s.root = RootFor(cache_salt);
  std::vector<BlockHash> hashes;
  const int64_t hits = MatchBlocks(s.root, prompt, &hashes);
  int64_t revived = 0;  // hits now cached: claiming them shrinks the evictable pool
  for (const BlockHash& h : hashes) revived += blocks_[prefix_index_.at(h)].ref_count == 0;
  const int64_t need = CeilDiv(static_cast<int64_t>(prompt.size()), block_size_) - hits;
  const int64_t available = NumAvailableBlocks() - revived;
  if (need > available) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: a ", prompt.size(),
                                                     "-token prompt needs ", need, " new blocks, ",
                                                     available, " available"));
  }
  // Claim the hits before taking new blocks, so eviction cannot pick them.
  for (const BlockHash& h : hashes) {
    const int32_t b = prefix_index_.at(h);
    Acquire(b);
    s.block_table.push_back(b);
  }
  const int64_t num_cached = hits * block_size_;
  s.token_ids.reserve(prompt.size());
  s.token_ids.assign(prompt.begin(), prompt.begin() + num_cached);
  s.block_hashes = std::move(hashes);
  s.num_computed = num_cached;
  s.num_cached = num_cached;
  AppendToSequence(s, prompt.subspan(num_cached));
  if (options_.enable_prefix_caching) {
    prefix_cache_queries_ += static_cast<int64_t>(prompt.size() - 1) / block_size_;
    prefix_cache_hits_ += hits;
  }
  sequences_.emplace(seq, std::move(s));
  return num_cached;
}

absl::StatusOr<std::vector<CopyOp>> BlockManager::AppendTokens(
    SeqId seq, absl::Span<const int32_t> token_ids) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  Sequence& s = it->second;
  std::vector<CopyOp> ops;
  if (token_ids.empty()) return ops;
  const int64_t need = BlocksForAppend(s, static_cast<int64_t>(token_ids.size()));
  if (need > NumAvailableBlocks()) {
    return absl::ResourceExhaustedError(absl::StrCat("KV cache full: appending ", token_ids.size(),
                                                     " tokens needs ", need, " blocks, ",
                                                     NumAvailableBlocks(), " available"));
  }
  if (s.token_ids.size() % block_size_ != 0) {
    const int32_t src = s.block_table.back();
    if (blocks_[src].ref_count > 1) {
      // Another sequence still reads src's slots: write into a private copy instead.
      const int32_t dst = TakeBlock();
      blocks_[dst].num_filled = blocks_[src].num_filled;
      num_tokens_stored_ += blocks_[dst].num_filled;
      Release(src);
      s.block_table.back() = dst;
      ops.push_back(CopyOp{src, dst});
      ++num_cow_copies_;
    }
  }
  AppendToSequence(s, token_ids);
  return ops;
}

absl::Status BlockManager::MarkComputed(SeqId seq, int64_t num_computed_tokens) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  Sequence& s = it->second;
  const int64_t n = static_cast<int64_t>(s.token_ids.size());
  if (num_computed_tokens < s.num_computed || num_computed_tokens > n) {
    return absl::InvalidArgumentError(absl::StrCat("num_computed_tokens ", num_computed_tokens,
                                                   " outside [", s.num_computed, ", ", n,
                                                   "] for sequence ", seq.value()));
  }
  const absl::Span<const int32_t> tokens(s.token_ids);
  for (int64_t i = static_cast<int64_t>(s.block_hashes.size());
       i < num_computed_tokens / block_size_; ++i) {
    const BlockHash& parent = i == 0 ? s.root : s.block_hashes[i - 1];
    const BlockHash h = HashBlock(parent, tokens.subspan(i * block_size_, block_size_));
    s.block_hashes.push_back(h);
    if (!options_.enable_prefix_caching) continue;
    Block& blk = blocks_[s.block_table[i]];
    // A block shared with another sequence was registered by it under this very hash.
    MOE_DCHECK(!blk.registered || blk.hash == h);
    // When another block already holds h (two sequences computed the same prefix at once),
    // this one stays unregistered and is freed, not cached, when released.
    if (!blk.registered && prefix_index_.emplace(h, s.block_table[i]).second) {
      blk.registered = true;
      blk.hash = h;
    }
  }
  s.num_computed = num_computed_tokens;
  return absl::OkStatus();
}

absl::Status BlockManager::Fork(SeqId parent, SeqId child) {
  auto it = sequences_.find(parent);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", parent.value()));
  }
  if (sequences_.contains(child)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", child.value(), " already exists"));
  }
  if (it->second.num_computed != static_cast<int64_t>(it->second.token_ids.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", parent.value(), " has uncomputed tokens; fork after its step"));
  }
  Sequence copy = it->second;
  for (int32_t b : copy.block_table) ++blocks_[b].ref_count;
  sequences_.emplace(child, std::move(copy));
  return absl::OkStatus();
}

absl::Status BlockManager::Free(SeqId seq) {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  const std::vector<int32_t>& table = it->second.block_table;
  for (auto b = table.rbegin(); b != table.rend(); ++b) Release(*b);
  sequences_.erase(it);
  return absl::OkStatus();
}

int64_t BlockManager::ResetPrefixCache() {
  int64_t dropped = 0;
  while (evictor_->Size() > 0) {
    const int32_t b = evictor_->Evict();
    Block& blk = blocks_[b];
    prefix_index_.erase(blk.hash);
    blk.registered = false;
    blk.num_filled = 0;
    free_list_.push_back(b);
    ++dropped;
  }
  return dropped;
}

absl::StatusOr<absl::Span<const int32_t>> BlockManager::BlockTable(SeqId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  return absl::Span<const int32_t>(it->second.block_table);
}

absl::StatusOr<SequenceInfo> BlockManager::GetSequenceInfo(SeqId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  const Sequence& s = it->second;
  return SequenceInfo{static_cast<int64_t>(s.token_ids.size()), s.num_computed, s.num_cached,
                      static_cast<int64_t>(s.block_table.size())};
}

absl::StatusOr<absl::Span<const BlockHash>> BlockManager::ComputedBlockHashes(SeqId seq) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  return absl::Span<const BlockHash>(it->second.block_hashes);
}

bool BlockManager::HasSequence(SeqId seq) const { return sequences_.contains(seq); }

int64_t BlockManager::NumAvailableBlocks() const {
  return static_cast<int64_t>(free_list_.size()) + evictor_->Size();
}

absl::StatusOr<int64_t> BlockManager::NumBlocksForAppend(SeqId seq, int64_t num_new_tokens) const {
  auto it = sequences_.find(seq);
  if (it == sequences_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown sequence ", seq.value()));
  }
  return BlocksForAppend(it->second, num_new_tokens);
}

BlockManagerStats BlockManager::GetStats() const {
  BlockManagerStats st;
  st.num_blocks_total = num_blocks_;
  st.num_blocks_used = num_used_;
  st.num_blocks_cached = evictor_->Size();
  st.num_blocks_free = static_cast<int64_t>(free_list_.size());
  st.num_sequences = static_cast<int64_t>(sequences_.size());
  st.num_tokens_stored = num_tokens_stored_;
  st.slot_utilisation =
      num_used_ == 0 ? 0.0
                     : static_cast<double>(num_tokens_stored_) /
                           (static_cast<double>(num_used_) * static_cast<double>(block_size_));
  st.usage_ratio = static_cast<double>(num_used_) / static_cast<double>(num_blocks_);
  st.prefix_cache_queries = prefix_cache_queries_;
  st.prefix_cache_hits = prefix_cache_hits_;
  st.num_evictions = num_evictions_;
  st.num_cow_copies = num_cow_copies_;
  return st;
}

std::string BlockManager::DebugString() const {
  std::vector<SeqId> ids;
  ids.reserve(sequences_.size());
  for (const auto& [id, s] : sequences_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::string out;
  for (SeqId id : ids) {
    const Sequence& s = sequences_.at(id);
    absl::StrAppend(&out, "seq ", id.value(), ":");
    for (int32_t b : s.block_table) {
      absl::StrAppend(&out, " ", b, blocks_[b].registered ? "*" : "");
    }
    absl::StrAppend(&out, " (tokens ", s.token_ids.size(), ", computed ", s.num_computed,
                    ", cached ", s.num_cached, ")\n");
  }
  std::vector<int32_t> free_sorted = free_list_;
  std::sort(free_sorted.begin(), free_sorted.end());
  absl::StrAppend(&out, "cached:", evictor_->Size() ? " " : "",
                  absl::StrJoin(evictor_->EvictionOrder(), " "), "\n");
  absl::StrAppend(&out, "free:", free_sorted.empty() ? "" : " ", absl::StrJoin(free_sorted, " "),
                  "\n");
  return out;
}

int32_t BlockManager::RefCountForTesting(int32_t block_id) const {
  return blocks_.at(block_id).ref_count;
}

absl::Status BlockManager::CheckInvariants() const {
  auto fail = [](auto&&... parts) { return absl::InternalError(absl::StrCat(parts...)); };
  std::vector<int32_t> refs(num_blocks_, 0);
  for (const auto& [id, s] : sequences_) {
    const int64_t n = static_cast<int64_t>(s.token_ids.size());
    if (static_cast<int64_t>(s.block_table.size()) != CeilDiv(n, block_size_)) {
      return fail("seq ", id.value(), ": ", s.block_table.size(), " blocks for ", n, " tokens");
    }
    if (s.num_computed > n || s.num_cached > n) {
      return fail("seq ", id.value(), ": computed/cached beyond its tokens");
    }
    if (static_cast<int64_t>(s.block_hashes.size()) != s.num_computed / block_size_) {
      return fail("seq ", id.value(), ": ", s.block_hashes.size(), " hashes for ", s.num_computed,
                  " computed tokens");
    }
    for (size_t i = 0; i < s.block_table.size(); ++i) {
      const int32_t b = s.block_table[i];
      if (b < 0 || b >= num_blocks_) return fail("seq ", id.value(), ": bad block id ", b);
      ++refs[b];
      const int64_t fill =
          std::min<int64_t>(block_size_, n - static_cast<int64_t>(i) * block_size_);
      if (blocks_[b].num_filled != fill) {
        return fail("block ", b, " holds ", blocks_[b].num_filled, " slots, seq ", id.value(),
                    " expects ", fill);
      }
      if (blocks_[b].registered && i < s.block_hashes.size() &&
          !(blocks_[b].hash == s.block_hashes[i])) {
        return fail("block ", b, " is registered under another hash than seq ", id.value(),
                    " computed for it");
      }
      if (blocks_[b].registered && i >= s.block_hashes.size()) {
        return fail("block ", b, " is registered but not computed by seq ", id.value());
      }
    }
  }
  std::vector<bool> in_free(num_blocks_, false);
  for (int32_t b : free_list_) {
    if (b < 0 || b >= num_blocks_ || in_free[b]) return fail("free list corrupt at block ", b);
    in_free[b] = true;
  }
  int64_t used = 0, cached = 0, registered = 0, stored = 0;
  for (int32_t b = 0; b < num_blocks_; ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref_count != refs[b]) {
      return fail("block ", b, " refcount ", blk.ref_count, " but ", refs[b], " table refs");
    }
    const bool is_free = in_free[b];
    const bool is_cached = evictor_->Contains(b);
    const bool is_used = blk.ref_count > 0;
    if (is_free + is_cached + is_used != 1) {
      return fail("block ", b, " is in ", is_free + is_cached + is_used, " states");
    }
    if (is_free && (blk.registered || blk.num_filled != 0)) return fail("free block ", b, " dirty");
    if (is_cached && !blk.registered) return fail("cached block ", b, " not registered");
    if (blk.registered) {
      ++registered;
      auto it = prefix_index_.find(blk.hash);
      if (it == prefix_index_.end() || it->second != b) {
        return fail("registered block ", b, " missing from the prefix index");
      }
      if (blk.num_filled != block_size_) return fail("registered block ", b, " not full");
    }
    used += is_used;
    cached += is_cached;
    if (is_used) stored += blk.num_filled;
  }
  if (registered != static_cast<int64_t>(prefix_index_.size())) {
    return fail("prefix index has ", prefix_index_.size(), " entries, ", registered,
                " registered blocks");
  }
  if (used != num_used_ || stored != num_tokens_stored_ || cached != evictor_->Size()) {
    return fail("counters: used ", num_used_, " vs ", used, ", stored ", num_tokens_stored_, " vs ",
                stored, ", cached ", evictor_->Size(), " vs ", cached);
  }
  if (used + cached + static_cast<int64_t>(free_list_.size()) != num_blocks_) {
    return fail("used + cached + free != total");
  }
  return absl::OkStatus();
}

}  // namespace moe::kv
