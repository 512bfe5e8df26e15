// Token counts of one finished (or ended) generation. The wire form is moe.router.v1.Usage
// (int32 fields; a context never holds 2^31 tokens, so the server adapters narrow there).
#pragma once

#include <cstdint>

namespace moe::generation {

struct Usage {
  int64_t prompt_tokens = 0;      // tokens of the prompt, >= 1 for a real request
  int64_t completion_tokens = 0;  // tokens generated, >= 0 (the stop token included)
  // Prompt tokens whose KV came from a prefix cache (L1, or the kv-store's L2/L3) at first
  // admission (not prefilled), in [0, prompt_tokens); prompt_tokens for a response-cache hit.
  int64_t cached_prompt_tokens = 0;
  // The whole response came from the exact response cache: nothing was computed. prompt_tokens
  // and completion_tokens are those of the response as first computed; cached_prompt_tokens is
  // prompt_tokens.
  bool from_response_cache = false;
};

}  // namespace moe::generation
