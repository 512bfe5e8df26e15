// A small driver that runs whole requests to completion over an Engine: each step it advances
// every active sequence together (a prefill chunk or one decode token each), samples, and stops
// sequences on EOS / stop ids / max_tokens / the context length. It owns a trivial block
// allocator over the engine's KV cache. Used by `moe generate`, benchmarks and tests; the
// router's continuous-batching scheduler replaces it in the cluster.
//
// Thread-compatible: one Generate() at a time per engine.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/engine.h"
#include "common/engine/sampler.h"
#include "common/generation/finish_reason.h"
#include "common/generation/sampling_params.h"

namespace moe::engine {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;  // >= 1 token
  generation::SamplingParams sampling;
  // Logits to return for the prompt: after its last position, or after every position.
  LogitsMode prompt_logits = LogitsMode::kNone;
};

struct GenerationResult {
  std::vector<int32_t> output_ids;   // includes the stop token when one ended the request
  std::vector<SampledToken> tokens;  // per output token, with logprobs when asked
  generation::FinishReason finish_reason = generation::FinishReason::kLength;  // kStop or kLength
  std::vector<float> prompt_logits;  // [rows, vocab] as asked by prompt_logits
};

struct GeneratorOptions {
  int64_t prefill_chunk = 512;  // most prompt tokens of one sequence per step
  // Model EOS ids that end a request unless ignore_eos (default: the config's eos_token_ids).
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 0x5eed;  // seeds requests without their own seed (request i gets seed + i)
};

class Generator {
 public:
  // Called after each sampled token: (request index, token). May be null.
  using TokenCallback = std::function<void(size_t request, const SampledToken& token)>;

  // `engine` is borrowed.
  Generator(Engine* engine, GeneratorOptions options);

  // Runs `requests` together until each finishes. Errors: InvalidArgument (bad request: empty
  // prompt, bad sampling params, prompt longer than the context), ResourceExhausted (the KV cache
  // cannot hold all sequences at once), or the engine's.
  absl::StatusOr<std::vector<GenerationResult>> Generate(
      absl::Span<const GenerationRequest> requests, const TokenCallback& on_token = nullptr);

 private:
  Engine* engine_;
  GeneratorOptions options_;
};

}  // namespace moe::engine
