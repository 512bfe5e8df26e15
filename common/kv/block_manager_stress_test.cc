// Randomized model check of BlockManager against a fake engine that "computes" K/V.
//
// Each slot of the fake KV pool holds a fingerprint of the whole token prefix up to that
// position (and the cache namespace), which is what real K/V depends on. The engine writes slots
// when the test runs a step, executes the manager's copy-on-write ops, and after every operation
// the test checks that every computed position of every live sequence reads its own correct
// fingerprint through its block table: a prefix hit, a copy or an eviction that served wrong
// K/V would show up as a mismatch. Structural invariants are checked after every op as well.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/base/hash.h"
#include "common/kv/block_manager.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::kv {
namespace {

constexpr int32_t kBlockSize = 4;
constexpr int32_t kNumBlocks = 512;
constexpr int kNumOps = 6000;
constexpr size_t kMaxLiveSeqs = 300;

struct ShadowSeq {
  std::string salt;
  std::vector<int32_t> tokens;
  std::vector<uint64_t> fingerprints;  // of tokens[0..p], per position p
  int64_t computed = 0;

  void Push(int32_t t) {
    const uint64_t parent = fingerprints.empty()
                                ? common::SplitMix64(std::hash<std::string>{}(salt))
                                : fingerprints.back();
    fingerprints.push_back(common::SplitMix64(parent ^ static_cast<uint32_t>(t)));
    tokens.push_back(t);
  }
};

class BlockManagerStressTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BlockManagerOptions o;
    o.block_size = kBlockSize;
    o.num_blocks = kNumBlocks;
    o.model_id = "stress";
    ASSERT_OK_AND_ASSIGN(bm_, BlockManager::Create(o));
    kv_.assign(static_cast<size_t>(kNumBlocks) * kBlockSize, 0);
    // A few shared "system prompts", so requests share prefixes of varied lengths.
    for (int i = 0; i < 6; ++i) {
      std::vector<int32_t> p(std::uniform_int_distribution<int>(0, 40)(rng_));
      for (int32_t& t : p) t = Token();
      system_prompts_.push_back(std::move(p));
    }
  }

  // A tiny vocabulary makes accidental shared blocks (and duplicate computations) common.
  int32_t Token() { return std::uniform_int_distribution<int32_t>(0, 5)(rng_); }
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  uint64_t& Slot(SeqId id, int64_t pos) {
    const absl::Span<const int32_t> table = *bm_->BlockTable(id);
    return kv_[static_cast<size_t>(table[pos / kBlockSize]) * kBlockSize + pos % kBlockSize];
  }

  SeqId PickLive() {
    auto it = live_.begin();
    std::advance(it, Uniform(0, static_cast<int>(live_.size()) - 1));
    return it->first;
  }

  void OpAllocate() {
    ShadowSeq s;
    s.salt = Uniform(0, 4) == 0 ? "tenant-b" : "";
    for (int32_t t : system_prompts_[Uniform(0, 5)]) s.Push(t);
    for (int n = Uniform(s.tokens.empty() ? 1 : 0, 20); n > 0; --n) s.Push(Token());
    const SeqId id(next_id_++);
    const std::string before = bm_->DebugString();
    absl::StatusOr<int64_t> cached = bm_->Allocate(id, s.tokens, s.salt);
    if (!cached.ok()) {
      ASSERT_EQ(cached.status().code(), absl::StatusCode::kResourceExhausted);
      ASSERT_EQ(bm_->DebugString(), before);
      ++num_exhausted_;
      return;
    }
    ASSERT_LT(*cached, static_cast<int64_t>(s.tokens.size()));
    ASSERT_EQ(*cached % kBlockSize, 0);
    s.computed = *cached;
    live_.emplace(id, std::move(s));
  }

  // One engine step for a sequence: writes K/V of some uncomputed positions.
  void OpStep() {
    const SeqId id = PickLive();
    ShadowSeq& s = live_.at(id);
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.computed == n) return;
    const int64_t upto = Uniform(static_cast<int>(s.computed) + 1, static_cast<int>(n));
    for (int64_t p = s.computed; p < upto; ++p) {
      // Copy-on-write must guarantee the engine never writes into a block others read.
      const int32_t block = (*bm_->BlockTable(id))[p / kBlockSize];
      ASSERT_EQ(bm_->RefCountForTesting(block), 1) << "write into a shared block " << block;
      Slot(id, p) = s.fingerprints[p];
    }
    ASSERT_OK(bm_->MarkComputed(id, upto));
    s.computed = upto;
  }

  void OpAppend() {
    const SeqId id = PickLive();
    ShadowSeq& s = live_.at(id);
    std::vector<int32_t> add(Uniform(1, 6));
    for (int32_t& t : add) t = Token();
    const std::string before = bm_->DebugString();
    absl::StatusOr<std::vector<CopyOp>> ops = bm_->AppendTokens(id, add);
    if (!ops.ok()) {
      ASSERT_EQ(ops.status().code(), absl::StatusCode::kResourceExhausted);
      ASSERT_EQ(bm_->DebugString(), before);
      ++num_exhausted_;
      return;
    }
    for (const CopyOp& op : *ops) {
      std::copy_n(kv_.begin() + static_cast<size_t>(op.src_block_id) * kBlockSize, kBlockSize,
                  kv_.begin() + static_cast<size_t>(op.dst_block_id) * kBlockSize);
    }
    num_copies_ += static_cast<int64_t>(ops->size());
    for (int32_t t : add) s.Push(t);
  }

  void OpFork() {
    const SeqId parent = PickLive();
    const ShadowSeq& p = live_.at(parent);
    const SeqId child(next_id_++);
    const absl::Status st = bm_->Fork(parent, child);
    if (p.computed != static_cast<int64_t>(p.tokens.size())) {
      ASSERT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
      return;
    }
    ASSERT_OK(st);
    ShadowSeq copy = p;
    live_.emplace(child, std::move(copy));
  }

  void OpFree() {
    const SeqId id = PickLive();
    ASSERT_OK(bm_->Free(id));
    live_.erase(id);
  }

  void CheckAll() {
    ASSERT_OK(bm_->CheckInvariants());
    std::vector<int32_t> refs(kNumBlocks, 0);
    for (const auto& [id, s] : live_) {
      ASSERT_OK_AND_ASSIGN(SequenceInfo info, bm_->GetSequenceInfo(id));
      ASSERT_EQ(info.num_tokens, static_cast<int64_t>(s.tokens.size()));
      ASSERT_EQ(info.num_computed_tokens, s.computed);
      const absl::Span<const int32_t> table = *bm_->BlockTable(id);
      for (int32_t b : table) ++refs[b];
      for (int64_t p = 0; p < s.computed; ++p) {
        const uint64_t got =
            kv_[static_cast<size_t>(table[p / kBlockSize]) * kBlockSize + p % kBlockSize];
        ASSERT_EQ(got, s.fingerprints[p]) << "seq " << id << " position " << p;
      }
    }
    for (int32_t b = 0; b < kNumBlocks; ++b) ASSERT_EQ(bm_->RefCountForTesting(b), refs[b]);
    const BlockManagerStats st = bm_->GetStats();
    ASSERT_EQ(st.num_blocks_used + st.num_blocks_cached + st.num_blocks_free, kNumBlocks);
    ASSERT_EQ(st.num_sequences, static_cast<int64_t>(live_.size()));
  }

  std::mt19937 rng_{20261129};
  std::unique_ptr<BlockManager> bm_;
  std::vector<uint64_t> kv_;  // the fake engine's pool: [num_blocks, block_size] fingerprints
  std::vector<std::vector<int32_t>> system_prompts_;
  absl::flat_hash_map<SeqId, ShadowSeq> live_;
  uint64_t next_id_ = 1;
  int64_t num_exhausted_ = 0;
  int64_t num_copies_ = 0;
};

TEST_F(BlockManagerStressTest, RandomWorkloadKeepsInvariantsAndEndsWithNoLeak) {
  size_t max_live = 0;
  for (int i = 0; i < kNumOps; ++i) {
    const int r = Uniform(0, 99);
    if (live_.empty() || (r < 30 && live_.size() < kMaxLiveSeqs)) {
      OpAllocate();
    } else if (r < 60) {
      OpStep();
    } else if (r < 78) {
      OpAppend();
    } else if (r < 86) {
      OpFork();
    } else {
      OpFree();
    }
    if (HasFatalFailure()) FAIL() << "at op " << i;
    max_live = std::max(max_live, live_.size());
    CheckAll();
    if (HasFatalFailure()) FAIL() << "at op " << i;
  }
  // The workload really exercised sharing, copy-on-write, eviction and exhaustion.
  const BlockManagerStats st = bm_->GetStats();
  std::printf("max live %zu, hits %lld/%lld blocks, evictions %lld, copies %lld, exhausted %lld\n",
              max_live, static_cast<long long>(st.prefix_cache_hits),
              static_cast<long long>(st.prefix_cache_queries),
              static_cast<long long>(st.num_evictions), static_cast<long long>(num_copies_),
              static_cast<long long>(num_exhausted_));
  EXPECT_GE(max_live, 100u);
  EXPECT_GT(st.prefix_cache_hits, 100);
  EXPECT_GT(st.num_evictions, 10);
  EXPECT_GT(num_copies_, 10);
  EXPECT_EQ(st.num_cow_copies, num_copies_);
  EXPECT_GT(num_exhausted_, 10);

  while (!live_.empty()) {
    OpFree();
    ASSERT_OK(bm_->CheckInvariants());
  }
  BlockManagerStats end = bm_->GetStats();
  EXPECT_EQ(end.num_blocks_used, 0);
  EXPECT_EQ(end.num_tokens_stored, 0);
  EXPECT_EQ(end.num_blocks_cached + end.num_blocks_free, kNumBlocks);
  EXPECT_EQ(bm_->ResetPrefixCache(), end.num_blocks_cached);
  end = bm_->GetStats();
  EXPECT_EQ(end.num_blocks_free, kNumBlocks);
  EXPECT_EQ(bm_->NumAvailableBlocks(), kNumBlocks);
  ASSERT_OK(bm_->CheckInvariants());
}

}  // namespace
}  // namespace moe::kv
