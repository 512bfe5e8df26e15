#include "services/router/core/step_plan.h"

#include "absl/strings/str_cat.h"

namespace moe::router {
namespace {

void AppendChunk(const PlannedChunk& c, std::string* out) {
  absl::StrAppend(out, " [", c.start_pos, ", ", c.start_pos + c.num_tokens, ")");
  if (c.want_logits) absl::StrAppend(out, " last");
}

}  // namespace

bool StepPlan::empty() const {
  if (!decodes.empty() || !prefills.empty()) return false;
  for (const Admission& a : admissions) {
    if (a.chunk.num_tokens > 0) return false;
  }
  return true;
}

void StepPlan::Reset(int64_t budget) {
  token_budget = budget;
  num_tokens = 0;
  decodes.clear();
  prefills.clear();
  admissions.clear();
  preempted.clear();
  failed.clear();
  copies.clear();
}

std::string StepPlan::DebugString() const {
  std::string out = absl::StrCat("tokens ", num_tokens, "/", token_budget, "\n");
  for (const PlannedChunk& c : decodes) {
    absl::StrAppend(&out, "decode ", c.seq->seq_id.value(), " @", c.start_pos, "\n");
  }
  for (const PlannedChunk& c : prefills) {
    absl::StrAppend(&out, "prefill ", c.seq->seq_id.value());
    AppendChunk(c, &out);
    out += "\n";
  }
  for (const Admission& a : admissions) {
    absl::StrAppend(&out, "admit ", a.seq->seq_id.value(), " cached ", a.num_cached_tokens);
    if (a.chunk.num_tokens > 0) {
      AppendChunk(a.chunk, &out);
    } else {
      out += " held";
    }
    out += "\n";
  }
  for (const SequenceState* s : preempted)
    absl::StrAppend(&out, "preempt ", s->seq_id.value(), "\n");
  for (const PlanFailure& f : failed) {
    absl::StrAppend(&out, "fail ", f.seq->seq_id.value(), ": ", f.status.ToString(), "\n");
  }
  for (const PlannedCopy& c : copies) {
    absl::StrAppend(&out, "copy ", c.op.src_block_id, " -> ", c.op.dst_block_id, " for ",
                    c.seq->seq_id.value(), "\n");
  }
  return out;
}

}  // namespace moe::router
