// Token sampling with vLLM semantics, one random stream per request. The parameters are the
// shared generation::SamplingParams (common/generation/sampling_params.h).
//
// Processing order for each step (as vLLM v1 does it):
//   1. logit_bias: logits[id] += bias.
//   2. penalties: repetition (over prompt and output tokens: a positive logit is divided by the
//      penalty, a negative one multiplied), then frequency and presence (over output tokens only:
//      logit -= frequency_penalty * count + presence_penalty * (count > 0)).
//   3. greedy (temperature < 1e-5): argmax, ties to the lowest token id. Otherwise:
//      temperature (logits / T), min_p (drop p < min_p * p_max), top_k (keep logits >= the k-th
//      largest, ties kept), top_p (keep the most probable tokens, in descending order, while the
//      mass before a token is < top_p), then one draw from the renormalised remainder.
// Log-probabilities are the log-softmax of the RAW model logits by default (vLLM's default,
// "raw_logprobs"); LogprobsMode::kProcessed returns them after steps 1-3 instead (masked tokens
// -inf).
//
// Randomness: a counter-based generator keyed by (seed, output index), so a seeded request draws
// the same numbers whatever it is batched with and however many steps other requests take.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/types/span.h"
#include "common/generation/sampling_params.h"

namespace moe::engine {

struct TokenLogprob {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

struct SampledToken {
  int32_t token_id = 0;
  float logprob = 0.0f;           // filled when params.logprobs >= 0
  std::vector<TokenLogprob> top;  // params.logprobs entries, descending (ties: lower id first)
};

// The sampling state of one request: its random stream and the token counts the penalties need.
// Thread-compatible (one sequence, one thread at a time). Scratch is per instance and sized once.
class SequenceSampler {
 public:
  // REQUIRES: params.Validate(vocab_size) is OK. `seed` is used when params.seed is unset.
  SequenceSampler(const generation::SamplingParams& params, absl::Span<const int32_t> prompt_ids,
                  int64_t vocab_size, uint64_t seed);

  // Picks the next token from `logits` [vocab] (not modified) and records it as output.
  SampledToken Sample(absl::Span<const float> logits);
  // The same among the tokens `allowed` permits (bit id % 32 of allowed[id / 32]; a constrained
  // sequence's grammar mask): the others count as -inf logits before step 1. Raw logprobs still
  // come from the unmasked logits. An empty span allows every token.
  // REQUIRES: allowed is empty or has (vocab + 31) / 32 words and permits at least one token.
  SampledToken Sample(absl::Span<const float> logits, absl::Span<const uint32_t> allowed);

  int64_t num_sampled() const;
  const generation::SamplingParams& params() const;

  ~SequenceSampler();
  SequenceSampler(SequenceSampler&&) noexcept;
  SequenceSampler& operator=(SequenceSampler&&) noexcept;

 private:
  struct Rep;  // the parameters, the random stream, penalty counts and [vocab] scratch
  std::unique_ptr<Rep> rep_;
};

// A uniform double in [0, 1) from (seed, counter): SplitMix64 finalisers, no state.
double CounterUniform(uint64_t seed, uint64_t counter);

// log_softmax of logits[n] into out[n] (f32 inputs, double accumulation; -inf stays -inf).
void LogSoftmax(const float* logits, int64_t n, float* out);

}  // namespace moe::engine
