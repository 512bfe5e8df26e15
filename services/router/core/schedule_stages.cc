#include "services/router/core/schedule_stages.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/base/check.h"

namespace moe::router {
namespace {

template <typename Queue>
void Insert(Queue* queue, SequenceState* seq) {
  queue->insert(std::upper_bound(queue->begin(), queue->end(), seq, SchedulingOrder()), seq);
}

// Plans the next `n` uncomputed tokens of `seq`.
PlannedChunk Chunk(SequenceState& seq, int64_t n) {
  return {.seq = &seq,
          .start_pos = seq.num_computed,
          .num_tokens = n,
          .want_logits = seq.num_computed + n == seq.num_tokens()};
}

// The next chunk of a sequence whose tokens all have slots: min(uncomputed, chunk size, budget)
// tokens; 0 when none fit, or when the chunk would end the prompt and the consumer is full.
int64_t NextChunkTokens(const StageContext& ctx, const SequenceState& seq, const StepPlan& plan) {
  const int64_t n = std::min({seq.num_tokens() - seq.num_computed, ctx.options.chunked_prefill_size,
                              plan.remaining_tokens()});
  if (n <= 0) return 0;
  if (seq.num_computed + n == seq.num_tokens() && !ctx.has_room(seq)) return 0;
  return n;
}

// Frees the blocks of running_.back() and requeues it (recompute: its tokens so far are kept).
SequenceState* PreemptLast(const StageContext& ctx, SchedulingQueues* queues) {
  kv::BlockManager& blocks = ctx.blocks;
  SequenceState* victim = queues->running.back();
  if (ctx.on_preempt) ctx.on_preempt(*victim);
  const absl::Status freed = blocks.Free(victim->seq_id);
  MOE_DCHECK(freed.ok());
  (void)freed;
  victim->running = false;
  victim->num_slots = 0;
  victim->num_computed = 0;
  queues->running.pop_back();
  Insert(&queues->waiting, victim);
  return victim;
}

}  // namespace

std::string SchedulingQueues::DebugString() const {
  std::string out = "running:";
  for (const SequenceState* s : running) absl::StrAppend(&out, " ", s->seq_id.value());
  out += "\nwaiting:";
  for (const SequenceState* s : waiting) absl::StrAppend(&out, " ", s->seq_id.value());
  return out;
}

void InsertInOrder(std::vector<SequenceState*>* queue, SequenceState* seq) { Insert(queue, seq); }
void InsertInOrder(std::deque<SequenceState*>* queue, SequenceState* seq) { Insert(queue, seq); }

void ScheduleDecodes(const StageContext& ctx, SchedulingQueues* queues, StepPlan* plan) {
  kv::BlockManager& blocks = ctx.blocks;
  std::vector<SequenceState*>& running = queues->running;
  for (size_t i = 0; i < running.size() && plan->remaining_tokens() > 0;) {
    SequenceState& seq = *running[i];
    if (!seq.is_decode() || !ctx.has_room(seq)) {
      ++i;
      continue;
    }
    // Victims come from the back, so they are never a decode planned before this one.
    bool self_preempted = false;
    for (;;) {
      absl::StatusOr<int64_t> need = blocks.NumBlocksForAppend(seq.seq_id, 1);
      if (!need.ok() || *need <= blocks.NumAvailableBlocks()) break;
      if (running.size() == 1) break;  // nothing else to take from: AppendTokens fails below
      SequenceState* victim = PreemptLast(ctx, queues);
      plan->preempted.push_back(victim);
      if (victim == &seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last running sequence left unscheduled
    absl::StatusOr<std::vector<kv::CopyOp>> copies =
        blocks.AppendTokens(seq.seq_id, absl::MakeConstSpan(&seq.tokens.back(), 1));
    if (!copies.ok()) {
      absl::Status status = copies.status();
      if (absl::IsResourceExhausted(status)) {
        status = absl::ResourceExhaustedError(
            absl::StrCat("sequence of ", seq.num_tokens(), " tokens outgrew the whole KV cache"));
      }
      // Freed now, so that the stages after this one can use its blocks.
      const absl::Status freed = blocks.Free(seq.seq_id);
      MOE_DCHECK(freed.ok());
      (void)freed;
      seq.running = false;
      plan->failed.push_back({&seq, std::move(status)});
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    for (const kv::CopyOp& op : *copies) plan->copies.push_back({&seq, op});
    ++seq.num_slots;
    plan->decodes.push_back(Chunk(seq, 1));
    ++plan->num_tokens;
    ++i;
  }
}

void ContinuePrefills(const StageContext& ctx, const SchedulingQueues& queues, StepPlan* plan) {
  // plan->decodes is a subsequence of the running queue, in its order: one cursor finds them.
  size_t next_decode = 0;
  for (SequenceState* seq : queues.running) {
    if (plan->remaining_tokens() <= 0) break;
    if (next_decode < plan->decodes.size() && plan->decodes[next_decode].seq == seq) {
      ++next_decode;
      continue;
    }
    if (seq->is_decode()) continue;  // held back or out of budget in stage 1
    if (seq->fetching) continue;     // its prefix is still coming from the kv tier
    const int64_t n = NextChunkTokens(ctx, *seq, *plan);
    if (n == 0) continue;
    plan->prefills.push_back(Chunk(*seq, n));
    plan->num_tokens += n;
  }
  MOE_DCHECK(next_decode == plan->decodes.size());
}

void AdmitWaiting(const StageContext& ctx, SchedulingQueues* queues, StepPlan* plan) {
  if (!plan->preempted.empty()) return;
  kv::BlockManager& blocks = ctx.blocks;
  const int64_t bs = blocks.block_size();
  while (plan->remaining_tokens() > 0 && !queues->waiting.empty() &&
         static_cast<int64_t>(queues->running.size()) < ctx.options.max_num_seqs) {
    SequenceState& seq = *queues->waiting.front();
    const int64_t len = seq.num_tokens();
    if (!queues->running.empty()) {
      // Keep a block of headroom per running sequence so admitting does not force the next
      // decode step to preempt what was just admitted.
      const int64_t matched = blocks.MatchPrefix(seq.tokens, seq.cache_salt);
      const int64_t need = (len + bs - 1) / bs - matched / bs;
      if (need + static_cast<int64_t>(queues->running.size()) > blocks.NumAvailableBlocks()) {
        break;
      }
    }
    absl::StatusOr<int64_t> cached = blocks.Allocate(seq.seq_id, seq.tokens, seq.cache_salt);
    if (absl::IsResourceExhausted(cached.status())) break;
    queues->waiting.pop_front();
    if (!cached.ok()) {
      plan->failed.push_back({&seq, cached.status()});
      continue;
    }
    seq.running = true;
    seq.num_slots = len;
    seq.num_computed = *cached;
    Insert(&queues->running, &seq);
    Admission admission{.seq = &seq, .num_cached_tokens = *cached};
    if (const int64_t n = NextChunkTokens(ctx, seq, *plan); n > 0) {
      admission.chunk = Chunk(seq, n);
      plan->num_tokens += n;
    } else {
      admission.chunk = {.seq = &seq, .start_pos = seq.num_computed};
    }
    plan->admissions.push_back(admission);
  }
}

void PlanStep(const StageContext& ctx, SchedulingQueues* queues, StepPlan* plan) {
  plan->Reset(ctx.options.max_batch_tokens);
  ScheduleDecodes(ctx, queues, plan);
  ContinuePrefills(ctx, *queues, plan);
  AdmitWaiting(ctx, queues, plan);
}

}  // namespace moe::router
