#include "services/router/core/schedule_stages.h"

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::router {
namespace {

using ::moe::common::SeqId;
using ::moe::common::testing::IsOk;

std::vector<int32_t> Tokens(int n, int32_t seed) {
  std::vector<int32_t> out(n);
  for (int i = 0; i < n; ++i) out[i] = (seed * 131 + i * 17) % 256;
  return out;
}

// Sequences and queues as the scheduler would hold them, over a real block manager with blocks
// of 4 tokens. Each test states the queues, runs a stage, and asserts on the plan and the queues.
class ScheduleStagesTest : public ::testing::Test {
 protected:
  void MakeBlocks(int64_t num_blocks) {
    kv::BlockManagerOptions o;
    o.block_size = 4;
    o.num_blocks = num_blocks;
    o.model_id = "test";
    ASSERT_OK_AND_ASSIGN(blocks_, kv::BlockManager::Create(o));
  }
  void SetUp() override {
    options_.max_batch_tokens = 16;
    options_.chunked_prefill_size = 8;
    MakeBlocks(32);
  }
  void TearDown() override { EXPECT_THAT(blocks_->CheckInvariants(), IsOk()); }

  SequenceState& New(uint64_t id, int num_tokens, int32_t priority) {
    SequenceState& s = seqs_.emplace_back();
    s.seq_id = SeqId(id);
    s.priority = priority;
    s.tokens = Tokens(num_tokens, static_cast<int32_t>(id));
    return s;
  }
  // A waiting request with a `num_tokens` prompt.
  SequenceState& Waiting(uint64_t id, int num_tokens, int32_t priority = 0) {
    SequenceState& s = New(id, num_tokens, priority);
    InsertInOrder(&queues_.waiting, &s);
    return s;
  }
  // A running sequence of `num_tokens` tokens, all with slots, `computed` of them computed:
  // a prefill in progress while computed < num_tokens.
  SequenceState& Prefilling(uint64_t id, int num_tokens, int computed, int32_t priority = 0) {
    SequenceState& s = New(id, num_tokens, priority);
    EXPECT_THAT(blocks_->Allocate(s.seq_id, s.tokens).status(), IsOk());
    EXPECT_THAT(blocks_->MarkComputed(s.seq_id, computed), IsOk());
    s.running = true;
    s.num_slots = num_tokens;
    s.num_computed = computed;
    InsertInOrder(&queues_.running, &s);
    return s;
  }
  // A running sequence about to decode position `pos`: positions [0, pos) computed, and the
  // token sampled after them not yet in the cache.
  SequenceState& Decoding(uint64_t id, int pos, int32_t priority = 0) {
    SequenceState& s = Prefilling(id, pos, pos, priority);
    s.tokens.push_back(7);
    return s;
  }

  StageContext Ctx() { return {.options = options_, .blocks = *blocks_, .has_room = has_room_}; }
  // The consumer of `id` has no room for another token.
  void Full(uint64_t id) { full_.insert(id); }

  std::string Run(void (*stage)(const StageContext&, SchedulingQueues*, StepPlan*)) {
    stage(Ctx(), &queues_, &plan_);
    return plan_.DebugString();
  }

  SchedulerOptions options_;
  std::unique_ptr<kv::BlockManager> blocks_;
  std::deque<SequenceState> seqs_;  // stable addresses
  SchedulingQueues queues_;
  StepPlan plan_{.token_budget = 16};
  absl::flat_hash_set<uint64_t> full_;
  std::function<bool(const SequenceState&)> has_room_ = [this](const SequenceState& s) {
    return !full_.contains(s.seq_id.value());
  };
};

void ContinuePrefillsStage(const StageContext& ctx, SchedulingQueues* q, StepPlan* plan) {
  ContinuePrefills(ctx, *q, plan);
}

TEST_F(ScheduleStagesTest, BothQueuesOrderByPriorityThenArrival) {
  Waiting(1, 4, /*priority=*/5);
  Waiting(2, 4, /*priority=*/-1);
  Waiting(3, 4, /*priority=*/5);
  Waiting(4, 4, /*priority=*/0);
  Decoding(5, 4, /*priority=*/3);
  Decoding(6, 4, /*priority=*/-2);
  Decoding(7, 4, /*priority=*/3);
  EXPECT_EQ(queues_.DebugString(), "running: 6 5 7\nwaiting: 2 4 1 3");
}

// --- Stage 1: ScheduleDecodes ------------------------------------------------------------------

TEST_F(ScheduleStagesTest, DecodesOneTokenEachInQueueOrder) {
  Decoding(1, 6);
  Decoding(2, 9, /*priority=*/-1);
  Prefilling(3, 12, 4);  // not a decode
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 2/16\ndecode 2 @9\ndecode 1 @6\n");
  EXPECT_EQ(queues_.running[0]->num_slots, 10);
}

TEST_F(ScheduleStagesTest, DecodeWhoseConsumerIsFullIsSkippedNotPreempted) {
  Decoding(1, 6);
  Decoding(2, 5);
  Full(1);
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 1/16\ndecode 2 @5\n");
  EXPECT_EQ(queues_.DebugString(), "running: 1 2\nwaiting:");
}

TEST_F(ScheduleStagesTest, DecodesStopAtTheTokenBudget) {
  plan_.Reset(2);
  Decoding(1, 4);
  Decoding(2, 4);
  Decoding(3, 4);
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 2/2\ndecode 1 @4\ndecode 2 @4\n");
}

// request.h: a lower priority value is the last to be preempted, whatever the arrival order.
TEST_F(ScheduleStagesTest, NoFreeBlockPreemptsTheLowestPriorityFirst) {
  MakeBlocks(5);
  Decoding(1, 12, /*priority=*/5);  // 3 full blocks, position 12 needs a 4th
  Decoding(2, 8, /*priority=*/-1);  // 2 full blocks, position 8 needs a 3rd; none is free
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 1/16\ndecode 2 @8\npreempt 1\n");
  EXPECT_EQ(queues_.DebugString(), "running: 2\nwaiting: 1");
  EXPECT_FALSE(blocks_->HasSequence(SeqId(1)));
  EXPECT_EQ(seqs_[0].num_slots, 0);
  EXPECT_EQ(seqs_[0].num_computed, 0);
  EXPECT_FALSE(seqs_[0].running);
}

TEST_F(ScheduleStagesTest, PreemptedSequenceGoesAheadOfLaterArrivalsOfItsPriority) {
  MakeBlocks(5);
  Decoding(1, 8);
  Decoding(2, 12);
  Waiting(3, 4);
  Waiting(4, 4, /*priority=*/-1);
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 1/16\ndecode 1 @8\npreempt 2\n");
  EXPECT_EQ(queues_.DebugString(), "running: 1\nwaiting: 4 2 3");
}

TEST_F(ScheduleStagesTest, DecodeThatIsItselfTheLastRunningIsPreemptedAndEndsTheStage) {
  MakeBlocks(7);
  Decoding(1, 5);  // 2 blocks, position 5 fits in the second
  Decoding(2, 8);  // 2 full blocks: position 8 needs a third
  Decoding(3, 8);  // likewise; one block is free
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 2/16\ndecode 1 @5\ndecode 2 @8\npreempt 3\n");
  EXPECT_EQ(queues_.DebugString(), "running: 1 2\nwaiting: 3");
}

TEST_F(ScheduleStagesTest, SequenceAloneThatOutgrewTheCacheFailsWithItsBlocksFreed) {
  MakeBlocks(2);
  Decoding(1, 8);
  Waiting(2, 4);
  EXPECT_EQ(Run(ScheduleDecodes),
            "tokens 0/16\nfail 1: RESOURCE_EXHAUSTED: sequence of 9 tokens outgrew the whole KV "
            "cache\n");
  EXPECT_EQ(queues_.DebugString(), "running:\nwaiting: 2");
  EXPECT_FALSE(blocks_->HasSequence(SeqId(1)));
  EXPECT_EQ(blocks_->NumAvailableBlocks(), 2);
}

TEST_F(ScheduleStagesTest, AppendIntoASharedPartialBlockPlansItsCopyFirst) {
  SequenceState& parent = Decoding(1, 6);
  SequenceState& child = New(2, 6, 0);
  child.tokens = parent.tokens;
  ASSERT_THAT(blocks_->Fork(SeqId(1), SeqId(2)), IsOk());
  child.running = true;
  child.num_slots = child.num_computed = 6;
  InsertInOrder(&queues_.running, &child);
  ASSERT_EQ(
      blocks_->DebugString(),
      "seq 1: 0* 1 (tokens 6, computed 6, cached 0)\n"
      "seq 2: 0* 1 (tokens 6, computed 6, cached 0)\n"
      "cached:\n"
      "free: 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31\n");
  // Sequence 1 writes position 6 into block 1, which 2 shares: it gets block 2, a copy of 1,
  // first; then 2 owns block 1 alone and appends in place.
  EXPECT_EQ(Run(ScheduleDecodes), "tokens 2/16\ndecode 1 @6\ndecode 2 @6\ncopy 1 -> 2 for 1\n");
}

// --- Stage 2: ContinuePrefills -----------------------------------------------------------------

TEST_F(ScheduleStagesTest, PrefillsGoOnInChunksWithinTheBudget) {
  options_.max_batch_tokens = 12;
  plan_.Reset(12);
  Prefilling(1, 20, 0);
  Prefilling(2, 10, 8);  // its last chunk: logits are sampled after it
  Prefilling(3, 20, 0);
  EXPECT_EQ(Run(ContinuePrefillsStage),
            "tokens 12/12\nprefill 1 [0, 8)\nprefill 2 [8, 10) last\nprefill 3 [0, 2)\n");
}

TEST_F(ScheduleStagesTest, LastPrefillChunkWaitsForRoomEarlierChunksDoNot) {
  Prefilling(1, 20, 0);
  Prefilling(2, 10, 8);
  Full(1);
  Full(2);
  EXPECT_EQ(Run(ContinuePrefillsStage), "tokens 8/16\nprefill 1 [0, 8)\n");
}

TEST_F(ScheduleStagesTest, SequenceDecodedThisStepGetsNoPrefillChunk) {
  Decoding(1, 4);
  Prefilling(2, 6, 2);
  ScheduleDecodes(Ctx(), &queues_, &plan_);
  EXPECT_EQ(Run(ContinuePrefillsStage), "tokens 5/16\ndecode 1 @4\nprefill 2 [2, 6) last\n");
}

// --- Stage 3: AdmitWaiting ---------------------------------------------------------------------

TEST_F(ScheduleStagesTest, AdmitsInQueueOrderEachWithAFirstChunk) {
  Waiting(1, 10);
  Waiting(2, 6, /*priority=*/-3);
  Waiting(3, 30);
  EXPECT_EQ(Run(AdmitWaiting),
            "tokens 16/16\nadmit 2 cached 0 [0, 6) last\nadmit 1 cached 0 [0, 8)\n"
            "admit 3 cached 0 [0, 2)\n");
  EXPECT_EQ(queues_.DebugString(), "running: 2 1 3\nwaiting:");
}

TEST_F(ScheduleStagesTest, CachedPrefixIsNotPrefilledAgain) {
  const std::vector<int32_t> prefix = Tokens(12, 99);
  ASSERT_THAT(blocks_->Allocate(SeqId(100), prefix).status(), IsOk());
  ASSERT_THAT(blocks_->MarkComputed(SeqId(100), 12), IsOk());
  ASSERT_THAT(blocks_->Free(SeqId(100)), IsOk());
  SequenceState& s = Waiting(1, 0);
  s.tokens = prefix;
  s.tokens.insert(s.tokens.end(), {1, 2, 3, 4});
  EXPECT_EQ(Run(AdmitWaiting), "tokens 4/16\nadmit 1 cached 12 [12, 16) last\n");
  EXPECT_EQ(s.num_computed, 12);
  EXPECT_EQ(s.num_slots, 16);
}

TEST_F(ScheduleStagesTest, HeadThatDoesNotFitWithHeadroomBlocksTheQueue) {
  MakeBlocks(8);
  Decoding(1, 8);  // 2 blocks: 6 available
  Waiting(2, 24);  // 6 blocks + 1 of headroom for sequence 1
  Waiting(3, 4);   // would fit, but is behind the head
  EXPECT_EQ(Run(AdmitWaiting), "tokens 0/16\n");
  EXPECT_EQ(queues_.DebugString(), "running: 1\nwaiting: 2 3");
}

TEST_F(ScheduleStagesTest, NoAdmissionInAStepThatPreempted) {
  MakeBlocks(5);
  Decoding(1, 12, /*priority=*/5);
  Decoding(2, 8);
  Waiting(3, 2);
  PlanStep(Ctx(), &queues_, &plan_);
  EXPECT_EQ(plan_.DebugString(), "tokens 1/16\ndecode 2 @8\npreempt 1\n");
  EXPECT_EQ(queues_.DebugString(), "running: 2\nwaiting: 3 1");
}

TEST_F(ScheduleStagesTest, AdmissionsStopAtMaxNumSeqs) {
  options_.max_num_seqs = 2;
  Decoding(1, 4);
  Waiting(2, 4);
  Waiting(3, 4);
  EXPECT_EQ(Run(AdmitWaiting), "tokens 4/16\nadmit 2 cached 0 [0, 4) last\n");
  EXPECT_EQ(queues_.DebugString(), "running: 1 2\nwaiting: 3");
}

TEST_F(ScheduleStagesTest, AdmittedWithoutAChunkWhileTheConsumerIsFull) {
  Waiting(1, 4);
  Full(1);
  EXPECT_EQ(Run(AdmitWaiting), "tokens 0/16\nadmit 1 cached 0 held\n");
  EXPECT_TRUE(plan_.empty());
  EXPECT_EQ(queues_.DebugString(), "running: 1\nwaiting:");
}

// --- The whole step ----------------------------------------------------------------------------

TEST_F(ScheduleStagesTest, StepMixesDecodesPrefillChunksAndAdmissionsInThatOrder) {
  Decoding(1, 9);
  Prefilling(2, 20, 8);
  Waiting(3, 5);
  Waiting(4, 5);
  PlanStep(Ctx(), &queues_, &plan_);
  EXPECT_EQ(plan_.DebugString(),
            "tokens 16/16\ndecode 1 @9\nprefill 2 [8, 16)\nadmit 3 cached 0 [0, 5) last\n"
            "admit 4 cached 0 [0, 2)\n");
  EXPECT_EQ(queues_.DebugString(), "running: 1 2 3 4\nwaiting:");
}

TEST_F(ScheduleStagesTest, ResetKeepsNothingButTheNewBudget) {
  Decoding(1, 4);
  PlanStep(Ctx(), &queues_, &plan_);
  plan_.Reset(8);
  EXPECT_EQ(plan_.DebugString(), "tokens 0/8\n");
  EXPECT_TRUE(plan_.empty());
}

}  // namespace
}  // namespace moe::router
