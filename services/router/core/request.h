// Plain data of one generation request as the scheduler sees it: token ids in, token ids out.
// The server layer converts proto <-> these structs; core never sees proto.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/engine/sampler.h"
#include "common/generation/finish_reason.h"
#include "common/generation/sampling_params.h"
#include "common/generation/usage.h"
#include "common/grammar/compiled_grammar.h"

namespace moe::router {

struct GenerateRequest {
  std::vector<int32_t> prompt_token_ids;  // [num_prompt_tokens], each in [0, vocab)
  // vLLM semantics (common/generation/sampling_params.h): temperature, top_k/top_p/min_p,
  // penalties, seed, stop_token_ids, max_tokens (0 = prefill only, ends with kLength),
  // ignore_eos, logprobs.
  generation::SamplingParams sampling;
  // The request ends with kAbort / DEADLINE_EXCEEDED once the scheduler's clock passes this.
  absl::Time deadline = absl::InfiniteFuture();
  // Lower runs first (admission order, and the last to be preempted); ties: first come first
  // served. [-1000, 1000].
  int32_t priority = 0;
  // Prefix-cache namespace: requests with different salts never share KV blocks ("" = shared).
  std::string cache_salt;
  // Constrained decoding: when set, each step samples only among the tokens the grammar allows
  // for this sequence (its own GrammarMatcher; never its batch), an EOS id is allowed exactly
  // when the output is complete, and once nothing but an EOS can follow, the EOS is appended
  // without another engine step (unless logprobs are asked for). Null: unconstrained. Compiled
  // for the runner's vocabulary (grammar::GrammarCache).
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
};

// What a consumer reads from a RequestStream: the tokens produced since the last read, and on the
// last event the finish reason, the final status and the usage.
struct StreamEvent {
  std::vector<int32_t> token_ids;
  // Parallel to token_ids when the request asked for logprobs (sampling.logprobs >= 0), else empty.
  std::vector<engine::SampledToken> logprobs;
  generation::FinishReason finish_reason = generation::FinishReason::kNone;
  absl::Status status;      // non-OK with kAbort / kError: why
  generation::Usage usage;  // filled on the final event; cached_prompt_tokens from L1 only
  bool final() const { return finish_reason != generation::FinishReason::kNone; }
};

}  // namespace moe::router
