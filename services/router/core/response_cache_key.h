// The exact response cache's key (issue 11): which requests may use it and what names them.
//
// Only deterministic requests: greedy (temperature < 1e-5), or sampled with a seed (the request's
// own random stream makes its output independent of its batch, DESIGN.md §3). Unseeded sampled
// requests never use it.
//
//   key = XXH3_128( "moe.response.v1"
//                   ‖ SerializeRootKey(namespace with the request's cache_salt)   model id,
//                       checkpoint fingerprint, block size, KV dtype, numerics (block_hash.h)
//                   ‖ the router's EOS ids ‖ the prompt ids
//                   ‖ every generation parameter: greedy flag, and when sampled temperature
//                     and seed; top_k, top_p, min_p, the three penalties, logit_bias (by id),
//                     stop_token_ids, max_tokens, ignore_eos, logprobs, logprobs_mode )
// with numbers as little-endian bytes and lists length-prefixed. Another checkpoint or numerics
// mode is another key, so such entries are never served (they age out of the LRU).
//
// Thread-safety: pure functions.
#pragma once

#include <span>

#include "common/generation/sampling_params.h"
#include "common/kv/block_hash.h"
#include "services/router/core/request.h"

namespace moe::router {

// Whether `request` may be answered from (and stored in) the response cache.
bool IsResponseCacheable(const GenerateRequest& request);

// The key described above. `ns`: the router's KV namespace (its cache_salt is ignored: the
// request's is used).
kv::BlockHash ResponseCacheKey(const kv::BlockHashRootKey& ns, std::span<const int32_t> eos_ids,
                               const GenerateRequest& request);

}  // namespace moe::router
