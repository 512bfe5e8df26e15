// Plain data of one generation request as the scheduler sees it: token ids in, token ids out.
// The server layer converts proto <-> these structs; core never sees proto.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/engine/sampler.h"

namespace moe::router {

// Why a request ended. Names are the `finish_reason` label values of DESIGN.md §5.
enum class FinishReason : uint8_t {
  kNone = 0,  // still running (only on non-final stream events)
  kStop,      // sampled a stop token id (the stop token is part of the output)
  kLength,    // reached max_tokens or the model context
  kAbort,     // cancelled by the client, deadline passed, or the scheduler shut down
  kError,     // the engine failed on a step that included this request
};

// "stop", "length", "abort", "error" ("" for kNone).
std::string_view FinishReasonName(FinishReason reason);

struct GenerateRequest {
  std::vector<int32_t> prompt_token_ids;  // [num_prompt_tokens], each in [0, vocab)
  // vLLM semantics (common/engine/sampler.h): temperature, top_k/top_p/min_p, penalties, seed,
  // stop_token_ids, max_tokens (0 = prefill only, ends with kLength), ignore_eos.
  engine::SamplingParams sampling;
  // The request ends with kAbort / DEADLINE_EXCEEDED once the scheduler's clock passes this.
  absl::Time deadline = absl::InfiniteFuture();
  // Lower runs first (admission order, and the last to be preempted); ties: first come first
  // served. [-1000, 1000].
  int32_t priority = 0;
  // Prefix-cache namespace: requests with different salts never share KV blocks ("" = shared).
  std::string cache_salt;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens whose KV came from the L1 prefix cache at first admission (not prefilled).
  int64_t cached_prompt_tokens = 0;
};

// What a consumer reads from a RequestStream: the tokens produced since the last read, and on the
// last event the finish reason, the final status and the usage.
struct StreamEvent {
  std::vector<int32_t> token_ids;
  // Parallel to token_ids when the request asked for logprobs (sampling.logprobs >= 0), else empty.
  std::vector<engine::SampledToken> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  absl::Status status;  // non-OK with kAbort / kError: why
  Usage usage;          // filled on the final event
  bool final() const { return finish_reason != FinishReason::kNone; }
};

}  // namespace moe::router
