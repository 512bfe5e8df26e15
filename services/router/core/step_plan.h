// The plan of one scheduler step: what the stages (schedule_stages.h) decided, for the scheduler
// to run in one place (copy-on-write copies, one engine step, sampling, streaming, finishing).
//
// Plain data. Sequences are borrowed: they are the scheduler's, and stay valid until the plan is
// run. The scheduler keeps one plan and Reset()s it every step: its lists keep their capacity,
// so they allocate only while growing to the largest step seen.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/kv/block_manager.h"
#include "services/router/core/sequence_state.h"

namespace moe::router {

// Tokens [start_pos, start_pos + num_tokens) of one sequence in this step's engine batch.
struct PlannedChunk {
  SequenceState* seq = nullptr;
  int64_t start_pos = 0;   // the sequence's num_computed when planned
  int64_t num_tokens = 0;  // >= 1; 0 only for an Admission held back (see there)
  // The chunk ends at the sequence's last token: its logits are sampled (a decode, or the last
  // chunk of a prompt).
  bool want_logits = false;
};

// A waiting sequence that got its KV blocks this step.
struct Admission {
  SequenceState* seq = nullptr;
  int64_t num_cached_tokens = 0;  // prompt tokens found in the prefix cache (not prefilled)
  // Its first chunk; num_tokens == 0 when that chunk would end the prompt but the consumer has
  // no room for the token it yields (back-pressure): admitted, computed in a later step.
  PlannedChunk chunk;
};

// A sequence the stages gave up on: it ends with FinishReason::kError and `status`. Its KV
// blocks are already freed, and it is in neither queue.
struct PlanFailure {
  SequenceState* seq = nullptr;
  absl::Status status;
};

// A copy-on-write the block manager asked for when `seq` appended: run it before the engine
// step (the engine writes into `op.dst_block_id`).
struct PlannedCopy {
  SequenceState* seq = nullptr;
  kv::CopyOp op;
};

struct StepPlan {
  // The step's token budget (SchedulerOptions::max_batch_tokens) and the tokens planned so far.
  int64_t token_budget = 0;
  int64_t num_tokens = 0;
  // Engine batch order: decodes, then continuing prefills, then the admissions' first chunks.
  std::vector<PlannedChunk> decodes;      // one token each, in running-queue order
  std::vector<PlannedChunk> prefills;     // running prefills, a chunk each, in running-queue order
  std::vector<Admission> admissions;      // in waiting-queue order
  std::vector<SequenceState*> preempted;  // last-first; each is back in the waiting queue
  std::vector<PlanFailure> failed;
  std::vector<PlannedCopy> copies;  // in the order they must run

  int64_t remaining_tokens() const { return token_budget - num_tokens; }
  // True when no chunk is planned (the step would run no engine batch).
  bool empty() const;

  // Clears every list and sets the budget; keeps the vectors' capacity.
  void Reset(int64_t budget);

  // One line per entry, in the order: the budget, decodes, prefills, admissions, preemptions,
  // failures, copies. E.g.
  //   tokens 11/16
  //   decode 1 @23
  //   prefill 2 [8, 16)
  //   admit 3 cached 4 [4, 6) last
  //   admit 5 cached 0 held
  //   preempt 4
  //   fail 6: RESOURCE_EXHAUSTED: sequence of 17 tokens outgrew the whole KV cache
  //   copy 7 -> 9 for 2
  // "@p" is a decode at position p; "[a, b)" a chunk's positions, "last" when it ends the prompt
  // (its logits are sampled); "held": admitted without a chunk (back-pressure). Tests assert on
  // it.
  std::string DebugString() const;
};

}  // namespace moe::router
