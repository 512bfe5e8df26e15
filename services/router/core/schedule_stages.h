// The scheduler's step as stages, in the spirit of TensorRT-LLM's capacity and micro-batch
// schedulers: each stage reads the queues and the block manager, reserves what it plans (KV
// slots and blocks; a preemption frees a victim's blocks and requeues it) and appends to the
// StepPlan. No stage touches a stream, a metric, the clock or the engine: the scheduler runs the
// plan afterwards (scheduler.cc), so every decision here can be tested on plain data.
//
// A step is PlanStep(): the three stages in this order.
//   1. ScheduleDecodes: every running decode (one token each) in queue order, preempting by
//      recompute when the KV cache has no block for one.
//   2. ContinuePrefills: running prefills, a chunk each, within the token budget.
//   3. AdmitWaiting: waiting requests in queue order, while max_num_seqs, the budget and free
//      KV blocks allow; never past a head that does not fit, and not in a step that preempted.
// Both queues keep SchedulingOrder (priority, then arrival).
//
// Thread-compatibility: plain functions over the caller's data; the scheduler calls them from
// its stepping thread, which owns the block manager.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "common/kv/block_manager.h"
#include "services/router/core/scheduler_options.h"
#include "services/router/core/sequence_state.h"
#include "services/router/core/step_plan.h"

namespace moe::router {

// The scheduler's two queues, both ascending in SchedulingOrder. Sequences are borrowed.
struct SchedulingQueues {
  std::vector<SequenceState*> running;  // hold KV blocks (running == true)
  std::deque<SequenceState*> waiting;   // hold none; the head is admitted first

  // "running: 1 2\nwaiting: 3" (seq ids in queue order). Tests assert on it.
  std::string DebugString() const;
};

// Inserts `seq` at its SchedulingOrder place, after any equal entry.
void InsertInOrder(std::vector<SequenceState*>* queue, SequenceState* seq);
void InsertInOrder(std::deque<SequenceState*>* queue, SequenceState* seq);

// What every stage reads besides the queues and the plan. Borrowed for one planning pass.
struct StageContext {
  const SchedulerOptions& options;  // max_num_seqs, chunked_prefill_size
  kv::BlockManager& blocks;         // the queues' sequences are its sequences (by seq_id)
  // Whether the consumer of `seq` can take another token now (RequestStream::HasRoom). A chunk
  // that would yield a token (a decode, the last chunk of a prompt) is planned only then.
  absl::FunctionRef<bool(const SequenceState&)> has_room;
  // Runs for a victim just before its blocks are freed by a preemption (their K/V still intact):
  // the scheduler cancels a fetch the victim is waiting for (so no write can touch the freed
  // pages), and its offload mode stores the victim's computed blocks in the kv tier. Optional.
  std::function<void(SequenceState&)> on_preempt;
};

// Stage 1. For each running decode in queue order, while the plan has budget: gives it a KV slot
// for its newest token (AppendTokens; copy-on-write ops go to plan->copies) and plans that one
// token. When the block manager has no block for it, the last running sequence is preempted
// (blocks freed, num_slots = num_computed = 0, requeued in waiting; plan->preempted), again until
// one is free; when the victim is the decode itself, the stage ends (every sequence after it is
// preempted already). A sequence alone in the running queue that still finds no block has
// outgrown the whole cache: it goes to plan->failed (RESOURCE_EXHAUSTED) with its blocks freed.
// Decodes whose consumer has no room are skipped (not preempted, not planned).
void ScheduleDecodes(const StageContext& ctx, SchedulingQueues* queues, StepPlan* plan);

// Stage 2. For each running sequence in queue order that is prefilling (every token has a slot,
// not all are computed), not fetching and not already in plan->decodes, while the plan has budget:
// plans its next min(uncomputed, chunked_prefill_size, remaining budget) tokens, unless that chunk
// ends the prompt and the consumer has no room. Reserves nothing (prefill slots were allocated at
// admission).
// REQUIRES: plan->decodes is empty or was filled by ScheduleDecodes over these queues.
void ContinuePrefills(const StageContext& ctx, const SchedulingQueues& queues, StepPlan* plan);

// Stage 3, skipped when plan->preempted is non-empty (the cache is already short). While the
// plan has budget and fewer than max_num_seqs sequences run: allocates the head of the waiting
// queue (Allocate: a prefix-cache hit is not recomputed, see Admission::num_cached_tokens),
// moves it to the running queue and plans its first chunk (as ContinuePrefills would). When
// sequences are already running, the head is admitted only if its blocks plus one block of
// headroom per running sequence are available, so the next decodes need not preempt it. Stops at
// the first head that does not fit (RESOURCE_EXHAUSTED from Allocate included); any other
// Allocate error sends the head to plan->failed and goes on.
void AdmitWaiting(const StageContext& ctx, SchedulingQueues* queues, StepPlan* plan);

// plan->Reset(options.max_batch_tokens), then the three stages in order.
void PlanStep(const StageContext& ctx, SchedulingQueues* queues, StepPlan* plan);

}  // namespace moe::router
