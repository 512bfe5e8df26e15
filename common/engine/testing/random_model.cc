#include "common/engine/testing/random_model.h"

#include <cmath>
#include <cstring>

namespace moe::engine::testing {
namespace {

class Builder {
 public:
  Builder(RandomModel* m, common::DType dtype, uint64_t seed)
      : m_(m), dtype_(dtype), state_(seed * 0x9e3779b97f4a7c15ull + 1) {}

  // Uniform in [center - scale, center + scale].
  kernels::WeightView Make(int64_t rows, int64_t cols, float scale, float center = 0.0f) {
    const int64_t n = rows * cols;
    auto buf = std::make_unique<std::vector<uint8_t>>(n * common::DTypeSize(dtype_));
    for (int64_t i = 0; i < n; ++i) {
      const float f = center + scale * (2.0f * Next() - 1.0f);
      if (dtype_ == common::DType::kF32) {
        std::memcpy(buf->data() + 4 * i, &f, 4);
      } else {
        const uint16_t h =
            dtype_ == common::DType::kBF16 ? common::F32ToBf16(f) : common::F32ToF16(f);
        std::memcpy(buf->data() + 2 * i, &h, 2);
      }
    }
    kernels::WeightView v{buf->data(), dtype_, rows, cols};
    m_->buffers.push_back(std::move(buf));
    return v;
  }
  model::ExpertWeights Ffn(int64_t hidden, int64_t inter) {
    return {Make(inter, hidden, 1.7f / std::sqrt(float(hidden))),
            Make(inter, hidden, 1.7f / std::sqrt(float(hidden))),
            Make(hidden, inter, 1.7f / std::sqrt(float(inter)))};
  }

 private:
  float Next() {
    state_ ^= state_ << 13;
    state_ ^= state_ >> 7;
    state_ ^= state_ << 17;
    return static_cast<float>(state_ >> 40) / static_cast<float>(1 << 24);
  }
  RandomModel* m_;
  common::DType dtype_;
  uint64_t state_;
};

}  // namespace

std::unique_ptr<RandomModel> MakeTinyRandomModel(model::Arch arch, common::DType dtype,
                                                 uint64_t seed) {
  auto m = std::make_unique<RandomModel>();
  model::ModelConfig& c = m->config;
  c.arch = arch;
  c.dtype = dtype;
  c.vocab_size = 512;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 4096;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 128;
  c.intermediate_size = 128;
  c.norm_topk_prob = arch == model::Arch::kMixtral;
  c.eos_token_id = 2;
  c.eos_token_ids = {2};
  if (arch == model::Arch::kQwen2Moe) {
    c.attention_bias = true;
    c.shared_expert_intermediate_size = 128;
  }
  if (arch == model::Arch::kQwen3Moe) {
    c.qk_norm = true;
    c.qk_norm_per_head = true;
    c.norm_topk_prob = true;
  }
  if (arch == model::Arch::kOlmoe) c.qk_norm = true;

  Builder b(m.get(), dtype, seed);
  const int64_t h = c.hidden_size, qd = c.q_size(), kvd = c.kv_size();
  const float proj = 1.7f / std::sqrt(float(h));
  m->weights.embed_tokens = b.Make(c.vocab_size, h, 1.0f);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    model::LayerWeights w;
    w.input_norm = b.Make(1, h, 0.2f, 1.0f);
    w.post_attn_norm = b.Make(1, h, 0.2f, 1.0f);
    // Large q/k so attention is peaked and an early token clearly matters.
    w.q_proj = b.Make(qd, h, 3 * proj);
    w.k_proj = b.Make(kvd, h, 3 * proj);
    w.v_proj = b.Make(kvd, h, proj);
    w.o_proj = b.Make(h, qd, 1.7f / std::sqrt(float(qd)));
    if (c.attention_bias) {
      w.q_bias = b.Make(1, qd, 0.1f);
      w.k_bias = b.Make(1, kvd, 0.1f);
      w.v_bias = b.Make(1, kvd, 0.1f);
    }
    if (c.qk_norm) {
      const int64_t qn = c.qk_norm_per_head ? c.head_dim : qd;
      const int64_t kn = c.qk_norm_per_head ? c.head_dim : kvd;
      w.q_norm = b.Make(1, qn, 0.5f, 2.0f);
      w.k_norm = b.Make(1, kn, 0.5f, 2.0f);
    }
    w.router = b.Make(c.num_experts, h, 2 * proj);
    for (int64_t e = 0; e < c.num_experts; ++e)
      w.experts.push_back(b.Ffn(h, c.moe_intermediate_size));
    if (c.shared_expert_intermediate_size > 0) {
      w.shared_expert = b.Ffn(h, c.shared_expert_intermediate_size);
      w.shared_expert_gate = b.Make(1, h, proj);
    }
    m->weights.layers.push_back(std::move(w));
  }
  m->weights.final_norm = b.Make(1, h, 0.2f, 1.0f);
  m->weights.lm_head = b.Make(c.vocab_size, h, 3 * proj);
  return m;
}

}  // namespace moe::engine::testing
