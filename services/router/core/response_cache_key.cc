#include "services/router/core/response_cache_key.h"

#include <xxhash.h>

#include <bit>
#include <string>

namespace moe::router {
namespace {

void U64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void I32(std::string* out, int32_t v) {
  const uint32_t u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(u >> (8 * i)));
}
void F32(std::string* out, float v) { I32(out, static_cast<int32_t>(std::bit_cast<uint32_t>(v))); }
void Ids(std::string* out, std::span<const int32_t> ids) {
  U64(out, ids.size());
  for (int32_t id : ids) I32(out, id);
}

}  // namespace

bool IsResponseCacheable(const GenerateRequest& request) {
  return request.sampling.greedy() || request.sampling.seed.has_value();
}

kv::BlockHash ResponseCacheKey(const kv::BlockHashRootKey& ns, std::span<const int32_t> eos_ids,
                               const GenerateRequest& request) {
  kv::BlockHashRootKey key = ns;
  key.cache_salt = request.cache_salt;
  std::string in = "moe.response.v1";
  const std::string root = kv::SerializeRootKey(key);
  U64(&in, root.size());
  in += root;
  Ids(&in, eos_ids);
  Ids(&in, request.prompt_token_ids);
  const generation::SamplingParams& p = request.sampling;
  in.push_back(p.greedy() ? 1 : 0);
  if (!p.greedy()) {
    F32(&in, p.temperature);
    U64(&in, p.seed.value_or(0));
  }
  I32(&in, p.top_k);
  F32(&in, p.top_p);
  F32(&in, p.min_p);
  F32(&in, p.repetition_penalty);
  F32(&in, p.frequency_penalty);
  F32(&in, p.presence_penalty);
  U64(&in, p.logit_bias.size());
  for (const auto& [id, bias] : p.logit_bias) {  // std::map: by id
    I32(&in, id);
    F32(&in, bias);
  }
  Ids(&in, p.stop_token_ids);
  I32(&in, p.max_tokens);
  in.push_back(p.ignore_eos ? 1 : 0);
  I32(&in, p.logprobs);
  I32(&in, static_cast<int32_t>(p.logprobs_mode));
  const XXH128_hash_t h = XXH3_128bits(in.data(), in.size());
  return kv::BlockHash{h.low64, h.high64};
}

}  // namespace moe::router
