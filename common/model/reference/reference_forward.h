// An independent, slow, obviously-correct forward pass of the four HF MoE architectures, written
// from the semantics of transformers' modeling code (modeling_mixtral / qwen2_moe / qwen3_moe /
// olmoe), not from the engine's fast path. Everything is computed in double precision from the
// stored weights (converted exactly from f32/bf16/f16); it uses no kernels.
//
// What it follows from HF, step by step (per decoder layer):
//   x = RMSNorm(h) * input_layernorm                      (x / sqrt(mean(x^2) + eps) * w)
//   q, k, v = x Wq^T (+bq), x Wk^T (+bk), x Wv^T (+bv)    (Qwen2-MoE qkv bias; attention_bias)
//   OLMoE: q = RMSNorm(q) * q_norm, k = RMSNorm(k) * k_norm over the whole projection, then
//          clamp to +-clip_qkv when set; Qwen3-MoE: RMSNorm per head over head_dim
//   RoPE, rotate_half convention; the angles pos * inv_freq are f32 values exactly as HF computes
//          them (inv_freq = 1 / theta^(2j/d) in f32, one f32 multiply), cos/sin in double
//   causal GQA attention: softmax(q.k * head_dim^-0.5) over keys 0..i (Mixtral sliding_window:
//          keys with i - j < window), query head h reads kv head h / (heads / kv_heads)
//   h += o_proj(attn) (+ o bias)
//   x = RMSNorm(h) * post_attention_layernorm
//   MoE layer: p = softmax(x Wr^T) over all experts; the top-k (ties: lower expert id first);
//          renormalised to sum 1 if norm_topk_prob (Mixtral: always);
//          out = sum_e p_e * down(silu(gate x) * up x);
//          Qwen2-MoE: + sigmoid(x . shared_expert_gate) * shared_expert(x)
//   dense layer (Qwen mlp_only_layers / decoder_sparse_step): out = mlp(x)
//   h += out
// logits = lm_head(RMSNorm(h) * norm).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/model_config.h"
#include "common/model/weights.h"

namespace moe::model::reference {

// Which experts each token was routed to, per layer (empty vectors on dense layers).
struct ReferenceTrace {
  std::vector<std::vector<std::vector<int32_t>>> experts;  // [layer][position][k], by weight desc
  std::vector<std::vector<std::vector<double>>> weights;   // [layer][position][k] combine weights
};

// One sequence, processed in chunks of any size with its K/V kept (like HF past_key_values): the
// logits of a position do not depend on how the sequence was chunked (bitwise).
class ReferenceModel {
 public:
  // Checks that every weight the forward pass needs is present with the right shape.
  // `weights` must outlive the model.
  static absl::StatusOr<ReferenceModel> Create(const ModelConfig& config,
                                               const ModelWeights& weights);

  // Appends `tokens` and returns the logits [tokens.size()][vocab] at their positions (double).
  // Routing decisions are appended to `trace` when given.
  absl::StatusOr<std::vector<std::vector<double>>> Forward(std::span<const int32_t> tokens,
                                                           ReferenceTrace* trace = nullptr);
  int64_t num_tokens() const { return pos_; }

 private:
  ReferenceModel(const ModelConfig& c, const ModelWeights& w) : c_(c), w_(&w) {}
  std::vector<double> Layer(int64_t layer, const std::vector<double>& h, int64_t pos,
                            ReferenceTrace* trace);

  ModelConfig c_;
  const ModelWeights* w_;
  int64_t pos_ = 0;
  std::vector<std::vector<double>> k_cache_, v_cache_;  // [layer][pos * kv_size]
  std::vector<float> inv_freq_;
};

// Logits at every position of `tokens` (one full-sequence pass).
absl::StatusOr<std::vector<std::vector<float>>> ReferenceLogits(const ModelConfig& config,
                                                                const ModelWeights& weights,
                                                                std::span<const int32_t> tokens,
                                                                ReferenceTrace* trace = nullptr);

// Greedy decoding: `n` tokens after `prompt` (argmax, ties to the lower id). When `step_logits`
// is given it receives the logits each generated token was chosen from ([n][vocab]).
absl::StatusOr<std::vector<int32_t>> ReferenceGreedy(
    const ModelConfig& config, const ModelWeights& weights, std::span<const int32_t> prompt,
    int64_t n, std::vector<std::vector<float>>* step_logits = nullptr);

}  // namespace moe::model::reference
