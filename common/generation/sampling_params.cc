#include "common/generation/sampling_params.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace moe::generation {

absl::Status SamplingParams::Validate(int64_t vocab_size) const {
  auto bad = [](auto&&... parts) { return absl::InvalidArgumentError(absl::StrCat(parts...)); };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) {
    return bad("temperature must be >= 0, got ", temperature);
  }
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p must be in [0, 1], got ", min_p);
  if (top_k < -1) return bad("top_k must be -1, 0 (off) or positive, got ", top_k);
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return bad("repetition_penalty must be > 0, got ", repetition_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return bad("frequency_penalty must be in [-2, 2], got ", frequency_penalty);
  }
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return bad("presence_penalty must be in [-2, 2], got ", presence_penalty);
  }
  if (max_tokens < 0) return bad("max_tokens must be >= 0, got ", max_tokens);
  if (logprobs < -1 || logprobs > vocab_size) {
    return bad("logprobs must be in [-1, ", vocab_size, "], got ", logprobs);
  }
  for (const auto& [id, b] : logit_bias) {
    if (id < 0 || id >= vocab_size) return bad("logit_bias: token id ", id, " outside vocabulary");
    if (!(b >= -100.0f && b <= 100.0f)) return bad("logit_bias: bias ", b, " not in [-100, 100]");
  }
  for (int32_t id : stop_token_ids) {
    if (id < 0 || id >= vocab_size) return bad("stop_token_ids: ", id, " outside vocabulary");
  }
  return absl::OkStatus();
}

}  // namespace moe::generation
