#include "common/kv/block_manager.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::kv {
namespace {

using ::moe::common::DType;
using ::moe::common::testing::IsOk;
using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::testing::DoubleEq;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<int32_t> Tokens(int32_t start, int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = start + i;
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

SeqId S(uint64_t id) { return SeqId(id); }

// Evicts the most recently released block first (the opposite of LRU), to show the manager
// defers to whatever policy it is given.
class MostRecentFirstPolicy final : public EvictionPolicy {
 public:
  void Add(int32_t b) override { held_.push_back(b); }
  void Remove(int32_t b) override { std::erase(held_, b); }
  Victim EvictVictim() override {
    const int32_t b = held_.back();
    held_.pop_back();
    return {b, EvictionReason::kLru};
  }
  void RecordLookup(int32_t, bool) override {}
  int64_t Size() const override { return static_cast<int64_t>(held_.size()); }
  bool Contains(int32_t b) const override {
    return std::find(held_.begin(), held_.end(), b) != held_.end();
  }
  std::vector<int32_t> EvictionOrder() const override { return {held_.rbegin(), held_.rend()}; }

 private:
  std::vector<int32_t> held_;
};

class BlockManagerTest : public ::testing::Test {
 protected:
  void Make(int64_t num_blocks, bool caching = true,
            std::unique_ptr<EvictionPolicy> policy = nullptr) {
    BlockManagerOptions o;
    o.block_size = 4;
    o.num_blocks = num_blocks;
    o.enable_prefix_caching = caching;
    o.model_id = "test-model";
    ASSERT_OK_AND_ASSIGN(bm_, BlockManager::Create(o, std::move(policy)));
  }
  // Allocates and marks the whole prompt computed, as one prefill step would.
  void Prefill(uint64_t seq, const std::vector<int32_t>& prompt, std::string_view salt = "") {
    ASSERT_OK(bm_->Allocate(S(seq), prompt, salt).status());
    ASSERT_OK(bm_->MarkComputed(S(seq), static_cast<int64_t>(prompt.size())));
  }
  void TearDown() override {
    if (bm_ != nullptr) {
      EXPECT_OK(bm_->CheckInvariants());
    }
  }

  std::unique_ptr<BlockManager> bm_;
};

TEST_F(BlockManagerTest, AllocateGivesEveryPromptTokenASlot) {
  Make(8);
  EXPECT_THAT(bm_->Allocate(S(1), Tokens(0, 10)), IsOkAndHolds(0));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0 1 2 (tokens 10, computed 0, cached 0)\n"
            "cached:\n"
            "free: 3 4 5 6 7\n");
  EXPECT_THAT(bm_->BlockTable(S(1)), IsOkAndHolds(ElementsAre(0, 1, 2)));
}

TEST_F(BlockManagerTest, ReusesComputedPrefixAcrossRequests) {
  Make(8);
  Prefill(1, Tokens(0, 10));
  EXPECT_THAT(bm_->Allocate(S(2), Concat(Tokens(0, 8), {50, 51, 52})), IsOkAndHolds(8));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1* 2 (tokens 10, computed 10, cached 0)\n"
            "seq 2: 0* 1* 3 (tokens 11, computed 8, cached 8)\n"
            "cached:\n"
            "free: 4 5 6 7\n");
  EXPECT_EQ(bm_->RefCountForTesting(0), 2);
  const BlockManagerStats st = bm_->GetStats();
  EXPECT_EQ(st.prefix_cache_queries, 4);  // 2 eligible blocks per prompt
  EXPECT_EQ(st.prefix_cache_hits, 2);
}

TEST_F(BlockManagerTest, PartialLastBlockIsNotShared) {
  Make(8);
  Prefill(1, Tokens(0, 10));
  EXPECT_THAT(bm_->Allocate(S(2), Tokens(0, 10)), IsOkAndHolds(8));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1* 2 (tokens 10, computed 10, cached 0)\n"
            "seq 2: 0* 1* 3 (tokens 10, computed 8, cached 8)\n"
            "cached:\n"
            "free: 4 5 6 7\n");
}

TEST_F(BlockManagerTest, FullyCachedPromptStillLeavesItsLastTokenToCompute) {
  Make(8);
  Prefill(1, Tokens(0, 8));
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 8)), 4);  // the last block is recomputed
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 9)), 8);
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 1)), 0);
  EXPECT_THAT(bm_->Allocate(S(2), Tokens(0, 8)), IsOkAndHolds(4));
  ASSERT_OK(bm_->MarkComputed(S(2), 8));
  // Block 2 recomputed block 1's content; block 1 keeps the hash, block 2 stays private.
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1* (tokens 8, computed 8, cached 0)\n"
            "seq 2: 0* 2 (tokens 8, computed 8, cached 4)\n"
            "cached:\n"
            "free: 3 4 5 6 7\n");
  ASSERT_OK(bm_->Free(S(2)));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1* (tokens 8, computed 8, cached 0)\n"
            "cached:\n"
            "free: 2 3 4 5 6 7\n");
}

TEST_F(BlockManagerTest, BlocksBecomeSharableOnlyOnceComputed) {
  Make(8);
  ASSERT_OK(bm_->Allocate(S(1), Tokens(0, 12)).status());
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 13)), 0);
  ASSERT_OK(bm_->MarkComputed(S(1), 6));  // a first prefill chunk
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 13)), 4);
  ASSERT_OK(bm_->MarkComputed(S(1), 12));
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 13)), 12);
}

TEST_F(BlockManagerTest, FreeCachesComputedBlocksTailFirst) {
  Make(8);
  Prefill(1, Tokens(0, 10));
  ASSERT_OK(bm_->Free(S(1)));
  // Block 2 was partial (never registered) and is free; 1 is released before 0, so it is evicted
  // before the head of the chain.
  EXPECT_EQ(bm_->DebugString(),
            "cached: 1 0\n"
            "free: 2 3 4 5 6 7\n");
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 10)), 8);
}

TEST_F(BlockManagerTest, CancelMidPrefillCachesOnlyComputedBlocks) {
  Make(8);
  ASSERT_OK(bm_->Allocate(S(1), Tokens(0, 10)).status());
  ASSERT_OK(bm_->MarkComputed(S(1), 5));
  ASSERT_OK(bm_->Free(S(1)));  // client went away before the next chunk
  EXPECT_EQ(bm_->DebugString(),
            "cached: 0\n"
            "free: 1 2 3 4 5 6 7\n");
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 10)), 4);
}

TEST_F(BlockManagerTest, FailedStepReleasesEveryBlockAndCachesNothing) {
  Make(8);
  ASSERT_OK(bm_->Allocate(S(1), Tokens(0, 10)).status());
  // The engine step failed: nothing was computed, the scheduler frees the sequence.
  ASSERT_OK(bm_->Free(S(1)));
  EXPECT_EQ(bm_->DebugString(),
            "cached:\n"
            "free: 0 1 2 3 4 5 6 7\n");
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 10)), 0);
}

TEST_F(BlockManagerTest, ExhaustedAppendLeavesStateUnchangedAndFreeReleasesAll) {
  Make(3);
  ASSERT_OK(bm_->Allocate(S(1), Tokens(0, 8)).status());
  const std::string before = bm_->DebugString();
  EXPECT_THAT(bm_->AppendTokens(S(1), Tokens(8, 5)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(bm_->DebugString(), before);
  EXPECT_THAT(bm_->AppendTokens(S(1), Tokens(8, 4)), IsOkAndHolds(IsEmpty()));
  ASSERT_OK(bm_->Free(S(1)));
  EXPECT_EQ(bm_->DebugString(),
            "cached:\n"
            "free: 0 1 2\n");
}

TEST_F(BlockManagerTest, ExhaustedAllocateCountsRevivedCachedBlocksAsUnavailable) {
  Make(3);
  Prefill(1, Tokens(0, 9));
  ASSERT_OK(bm_->Free(S(1)));
  ASSERT_EQ(bm_->DebugString(), "cached: 1 0\nfree: 2\n");
  const BlockManagerStats stats_before = bm_->GetStats();
  // Hits blocks 0 and 1 and needs 2 more, but claiming the hits leaves only block 2.
  EXPECT_THAT(bm_->Allocate(S(2), Concat(Tokens(0, 8), Tokens(90, 5))),
              StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(bm_->DebugString(), "cached: 1 0\nfree: 2\n");
  EXPECT_EQ(bm_->GetStats().prefix_cache_queries, stats_before.prefix_cache_queries);
  EXPECT_FALSE(bm_->HasSequence(S(2)));
  EXPECT_THAT(bm_->Allocate(S(2), Concat(Tokens(0, 8), Tokens(90, 4))), IsOkAndHolds(8));
  EXPECT_EQ(bm_->DebugString(),
            "seq 2: 0* 1* 2 (tokens 12, computed 8, cached 8)\n"
            "cached:\n"
            "free:\n");
}

TEST_F(BlockManagerTest, CopyOnWriteWhenAppendingIntoSharedPartialBlock) {
  Make(8);
  Prefill(1, Tokens(0, 6));
  ASSERT_OK(bm_->Fork(S(1), S(2)));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1 (tokens 6, computed 6, cached 0)\n"
            "seq 2: 0* 1 (tokens 6, computed 6, cached 0)\n"
            "cached:\n"
            "free: 2 3 4 5 6 7\n");
  EXPECT_THAT(bm_->NumBlocksForAppend(S(2), 1), IsOkAndHolds(1));
  EXPECT_THAT(bm_->AppendTokens(S(2), {100}), IsOkAndHolds(ElementsAre(CopyOp{1, 2})));
  // Seq 1 is now block 1's only owner and writes in place.
  EXPECT_THAT(bm_->AppendTokens(S(1), {200}), IsOkAndHolds(IsEmpty()));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1 (tokens 7, computed 6, cached 0)\n"
            "seq 2: 0* 2 (tokens 7, computed 6, cached 0)\n"
            "cached:\n"
            "free: 3 4 5 6 7\n");
  EXPECT_EQ(bm_->GetStats().num_cow_copies, 1);
}

TEST_F(BlockManagerTest, ExhaustedCopyOnWriteLeavesBlockShared) {
  Make(3);
  Prefill(1, Tokens(0, 6));
  ASSERT_OK(bm_->Fork(S(1), S(2)));
  ASSERT_OK(bm_->Allocate(S(3), {50}).status());  // takes the last block
  const std::string before = bm_->DebugString();
  EXPECT_THAT(bm_->AppendTokens(S(2), {100}), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(bm_->DebugString(), before);
  EXPECT_EQ(bm_->RefCountForTesting(1), 2);
  ASSERT_OK(bm_->Free(S(3)));
  EXPECT_THAT(bm_->AppendTokens(S(2), {100}), IsOkAndHolds(ElementsAre(CopyOp{1, 2})));
}

TEST_F(BlockManagerTest, ForkAtBlockBoundaryCopiesNothing) {
  Make(8);
  Prefill(1, Tokens(0, 8));
  ASSERT_OK(bm_->Fork(S(1), S(2)));
  EXPECT_THAT(bm_->AppendTokens(S(1), {1}), IsOkAndHolds(IsEmpty()));
  EXPECT_THAT(bm_->AppendTokens(S(2), {2}), IsOkAndHolds(IsEmpty()));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1* 2 (tokens 9, computed 8, cached 0)\n"
            "seq 2: 0* 1* 3 (tokens 9, computed 8, cached 0)\n"
            "cached:\n"
            "free: 4 5 6 7\n");
}

TEST_F(BlockManagerTest, ForkRejectsUncomputedParentUnknownParentAndTakenChild) {
  Make(8);
  ASSERT_OK(bm_->Allocate(S(1), Tokens(0, 6)).status());
  EXPECT_THAT(bm_->Fork(S(1), S(2)), StatusIs(absl::StatusCode::kFailedPrecondition));
  ASSERT_OK(bm_->MarkComputed(S(1), 6));
  EXPECT_THAT(bm_->Fork(S(9), S(2)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->Fork(S(1), S(1)), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_FALSE(bm_->HasSequence(S(2)));
}

TEST_F(BlockManagerTest, SlotUtilisationCountsSharedBlocksOnce) {
  Make(8);
  Prefill(1, Tokens(0, 6));
  ASSERT_OK(bm_->Fork(S(1), S(2)));
  BlockManagerStats st = bm_->GetStats();
  EXPECT_EQ(st.num_blocks_used, 2);
  EXPECT_EQ(st.num_tokens_stored, 6);
  EXPECT_THAT(st.slot_utilisation, DoubleEq(6.0 / 8.0));
  EXPECT_THAT(st.usage_ratio, DoubleEq(2.0 / 8.0));
  ASSERT_OK(bm_->AppendTokens(S(2), {1}).status());  // CoW: blocks 1 and 2 hold 2 and 3 tokens
  st = bm_->GetStats();
  EXPECT_EQ(st.num_tokens_stored, 4 + 2 + 3);
  EXPECT_THAT(st.slot_utilisation, DoubleEq(9.0 / 12.0));
  EXPECT_EQ(st.num_blocks_used + st.num_blocks_cached + st.num_blocks_free, st.num_blocks_total);
}

TEST_F(BlockManagerTest, LruEvictsLeastRecentlyReleasedCachedBlock) {
  Make(4);
  const std::vector<int32_t> a = Tokens(0, 5), b = Tokens(100, 5);
  Prefill(1, a);
  ASSERT_OK(bm_->Free(S(1)));
  Prefill(2, b);
  ASSERT_OK(bm_->Free(S(2)));
  ASSERT_EQ(bm_->DebugString(), "cached: 0 1\nfree: 2 3\n");
  // Needs 3 blocks: both free ones, then the LRU victim (a's block 0).
  ASSERT_OK(bm_->Allocate(S(3), Tokens(200, 9)).status());
  EXPECT_EQ(bm_->DebugString(),
            "seq 3: 2 3 0 (tokens 9, computed 0, cached 0)\n"
            "cached: 1\n"
            "free:\n");
  EXPECT_EQ(bm_->GetStats().num_evictions, 1);
  // The evicted block's hash entry went with it; b's block is still served.
  EXPECT_EQ(bm_->MatchPrefix(a), 0);
  EXPECT_EQ(bm_->MatchPrefix(b), 4);
  ASSERT_OK(bm_->Free(S(3)));
  EXPECT_THAT(bm_->Allocate(S(4), a), IsOkAndHolds(0));  // recomputed, never stale
}

TEST_F(BlockManagerTest, UsesInjectedEvictionPolicy) {
  Make(4, true, std::make_unique<MostRecentFirstPolicy>());
  const std::vector<int32_t> a = Tokens(0, 5), b = Tokens(100, 5);
  Prefill(1, a);
  ASSERT_OK(bm_->Free(S(1)));
  Prefill(2, b);
  ASSERT_OK(bm_->Free(S(2)));
  ASSERT_OK(bm_->Allocate(S(3), Tokens(200, 9)).status());
  EXPECT_EQ(bm_->MatchPrefix(a), 4);
  EXPECT_EQ(bm_->MatchPrefix(b), 0);
}

TEST_F(BlockManagerTest, PrefixHitRevivesCachedBlock) {
  Make(4);
  Prefill(1, Tokens(0, 5));
  ASSERT_OK(bm_->Free(S(1)));
  ASSERT_EQ(bm_->GetStats().num_blocks_cached, 1);
  EXPECT_THAT(bm_->Allocate(S(2), Tokens(0, 5)), IsOkAndHolds(4));
  EXPECT_EQ(bm_->DebugString(),
            "seq 2: 0* 1 (tokens 5, computed 4, cached 4)\n"
            "cached:\n"
            "free: 2 3\n");
  EXPECT_EQ(bm_->GetStats().num_tokens_stored, 5);
}

TEST_F(BlockManagerTest, CacheSaltSeparatesNamespaces) {
  Make(8);
  Prefill(1, Tokens(0, 9), "tenant-a");
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 9), "tenant-a"), 8);
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 9), "tenant-b"), 0);
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 9)), 0);
}

TEST_F(BlockManagerTest, DisabledPrefixCachingNeverSharesOrCaches) {
  Make(8, /*caching=*/false);
  Prefill(1, Tokens(0, 10));
  EXPECT_THAT(bm_->Allocate(S(2), Tokens(0, 10)), IsOkAndHolds(0));
  ASSERT_OK(bm_->Free(S(1)));
  ASSERT_OK(bm_->Free(S(2)));
  EXPECT_EQ(bm_->DebugString(), "cached:\nfree: 0 1 2 3 4 5 6 7\n");
  EXPECT_EQ(bm_->GetStats().prefix_cache_queries, 0);
}

TEST_F(BlockManagerTest, ComputedBlockHashesFollowTheChain) {
  Make(8);
  Prefill(1, Tokens(0, 10), "s");
  const BlockHash root = RootHash({"test-model", 4, DType::kF32, "s"});
  ASSERT_OK_AND_ASSIGN(absl::Span<const BlockHash> hashes, bm_->ComputedBlockHashes(S(1)));
  EXPECT_EQ(std::vector<BlockHash>(hashes.begin(), hashes.end()),
            HashFullBlocks(root, Tokens(0, 10), 4));
}

TEST_F(BlockManagerTest, ResetPrefixCacheDropsOnlyUnreferencedBlocks) {
  Make(8);
  Prefill(1, Tokens(0, 10));
  Prefill(2, Tokens(20, 9));
  ASSERT_OK(bm_->Free(S(2)));
  EXPECT_EQ(bm_->ResetPrefixCache(), 2);
  EXPECT_EQ(bm_->MatchPrefix(Tokens(0, 10)), 8);
  EXPECT_EQ(bm_->MatchPrefix(Tokens(20, 9)), 0);
  EXPECT_EQ(bm_->GetStats().num_blocks_cached, 0);
}

TEST_F(BlockManagerTest, ReportsSequenceInfoAndAppendNeeds) {
  Make(8);
  Prefill(1, Tokens(0, 9));
  ASSERT_OK(bm_->Allocate(S(2), Tokens(0, 10)).status());
  ASSERT_OK_AND_ASSIGN(SequenceInfo info, bm_->GetSequenceInfo(S(2)));
  EXPECT_EQ(info.num_tokens, 10);
  EXPECT_EQ(info.num_computed_tokens, 8);
  EXPECT_EQ(info.num_cached_tokens, 8);
  EXPECT_EQ(info.num_blocks, 3);
  EXPECT_THAT(bm_->NumBlocksForAppend(S(2), 2), IsOkAndHolds(0));
  EXPECT_THAT(bm_->NumBlocksForAppend(S(2), 3), IsOkAndHolds(1));
  EXPECT_THAT(bm_->NumBlocksForAppend(S(2), 0), IsOkAndHolds(0));
  EXPECT_EQ(bm_->NumAvailableBlocks(), 4);
}

TEST_F(BlockManagerTest, RejectsBadCallsWithoutChangingState) {
  Make(8);
  ASSERT_OK(bm_->Allocate(S(1), Tokens(0, 6)).status());
  EXPECT_THAT(bm_->Allocate(S(1), Tokens(0, 3)), StatusIs(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(bm_->Allocate(S(2), {}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bm_->AppendTokens(S(2), {1}), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->MarkComputed(S(2), 0), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->MarkComputed(S(1), 7), StatusIs(absl::StatusCode::kInvalidArgument));
  ASSERT_OK(bm_->MarkComputed(S(1), 4));
  EXPECT_THAT(bm_->MarkComputed(S(1), 3), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(bm_->Free(S(2)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->BlockTable(S(2)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->GetSequenceInfo(S(2)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->ComputedBlockHashes(S(2)), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(bm_->NumBlocksForAppend(S(2), 1), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(bm_->DebugString(),
            "seq 1: 0* 1 (tokens 6, computed 4, cached 0)\n"
            "cached:\n"
            "free: 2 3 4 5 6 7\n");
}

TEST(BlockManagerOptionsTest, ValidatesBlockSizeAndPoolSize) {
  BlockManagerOptions o;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));  // no pool size
  o.num_blocks = 10;
  EXPECT_THAT(o.Validate(), IsOk());
  o.memory_budget_bytes = 1000;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));  // both forms
  o.num_blocks = 0;
  o.bytes_per_block = 100;
  EXPECT_THAT(o.Validate(), IsOk());
  EXPECT_EQ(o.ResolvedNumBlocks(), 10);
  o.bytes_per_block = 1001;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));  // 0 blocks
  o.bytes_per_block = 100;
  o.block_size = 0;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  o.block_size = 16;
  o.num_blocks = -1;
  o.memory_budget_bytes = o.bytes_per_block = 0;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(BlockManager::Create(o), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(BlockManagerOptionsTest, MemoryBudgetSizesThePool) {
  // The small preset: 4 layers, 2 KV heads of 64, f32 => 64 KiB per 16-token block.
  const int64_t per_block = KvBytesPerBlock(4, 16, 2, 64, DType::kF32);
  EXPECT_EQ(per_block, 65536);
  BlockManagerOptions o;
  o.memory_budget_bytes = 100 * per_block + 5;
  o.bytes_per_block = per_block;
  ASSERT_OK_AND_ASSIGN(auto bm, BlockManager::Create(o));
  EXPECT_EQ(bm->num_blocks(), 100);
  EXPECT_EQ(bm->GetStats().num_blocks_free, 100);
}

}  // namespace
}  // namespace moe::kv
