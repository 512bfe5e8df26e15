// How one request's tokens are chosen and when it stops: the sampling parameters that the
// gateway parses from OpenAI requests, the router receives in Generate, and the engine's
// sampler (common/engine/sampler.h) and generation loops apply, with vLLM semantics.
//
// The wire form is moe.common.v1.SamplingParams plus moe.router.v1.GenerateRequest's
// max_tokens, stop_token_ids, ignore_eos, logprobs and top_logprobs. Proto "unset" values are
// resolved by the server adapters, not here: temperature 0 (greedy), top_p and
// repetition_penalty 0 (= 1), max_tokens 0 (= until a stop token or the end of the context),
// logprobs = top_logprobs when the request asks for logprobs, else -1. logprobs_mode is not on
// the wire (routers return raw logprobs).
//
// Plain data; copyable.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "absl/status/status.h"

namespace moe::generation {

// Which distribution logprobs come from: the raw model logits (vLLM's default) or the logits
// after logit_bias, penalties, temperature and the filters (masked tokens -inf).
enum class LogprobsMode : uint8_t { kRaw, kProcessed };

struct SamplingParams {
  float temperature = 1.0f;             // < 1e-5: greedy (argmax, ties to the lowest id)
  int32_t top_k = 0;                    // <= 0: off
  float top_p = 1.0f;                   // (0, 1]
  float min_p = 0.0f;                   // [0, 1]
  std::optional<uint64_t> seed;         // none: the generator draws one per request
  float repetition_penalty = 1.0f;      // > 0; 1 = off
  float frequency_penalty = 0.0f;       // [-2, 2]
  float presence_penalty = 0.0f;        // [-2, 2]
  std::map<int32_t, float> logit_bias;  // token id -> bias in [-100, 100]
  std::vector<int32_t> stop_token_ids;  // finish (reason stop) after emitting one of these
  int32_t max_tokens = 16;              // >= 0; 0 = prefill only (ends with kLength)
  bool ignore_eos = false;              // do not stop at the model's EOS ids
  int32_t logprobs = -1;                // -1: none; 0: the sampled token's; N: also the top N
  LogprobsMode logprobs_mode = LogprobsMode::kRaw;

  bool greedy() const { return temperature < 1e-5f; }
  // The request asks for logprobs, and how many alternatives per token (OpenAI's logprobs /
  // top_logprobs pair).
  bool returns_logprobs() const { return logprobs >= 0; }
  int32_t num_top_logprobs() const { return logprobs > 0 ? logprobs : 0; }

  // kInvalidArgument naming the field when a value is out of the ranges above (token ids are
  // checked against vocab_size).
  absl::Status Validate(int64_t vocab_size) const;
};

}  // namespace moe::generation
