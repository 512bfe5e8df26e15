// Views of a model's weights, as stored (memory-mapped safetensors; never copied twice).
// Every view points into memory owned by the ModelWeights' loader and is valid while it lives.
#pragma once

#include <cstdint>
#include <vector>

#include "common/kernels/kernels.h"

namespace moe::model {

using kernels::WeightView;  // data == nullptr means "absent" (e.g. no bias)

// The cluster's weight numerics: the checkpoint's weights as stored (f32/bf16/f16), or the
// projections quantized to q8_0 on load (kernels.h INT8 WEIGHTS: W8A8). Opt-in and cluster-wide
// like the activation mode: every router and expert worker of a cluster loads the same way, and
// a peer in another mode is refused (ExpertCall::weights), since the bits differ.
// In kQ8_0 mode the Linear weights with a multiple of 32 input features are quantized: q/k/v/o,
// routed and shared experts, dense MLPs and lm_head. The MoE router gates, the shared-expert gate,
// the embeddings, norms and biases stay as stored (they are small, and routing decisions are the
// most sensitive to rounding: llama.cpp keeps its ffn_gate_inp unquantized too).
enum class WeightsMode : uint8_t { kCheckpoint = 0, kQ8_0 = 1 };

// "checkpoint" / "q8_0" (the config value of core.weights).
constexpr const char* WeightsModeName(WeightsMode m) {
  return m == WeightsMode::kQ8_0 ? "q8_0" : "checkpoint";
}
// Convention: a 1-D tensor [n] (norm weights, biases) is the view rows = 1, cols = n.

// One expert's SwiGLU FFN: down(silu(gate x) * up x). HF names: Mixtral w1/w3/w2,
// Qwen/OLMoE gate_proj/up_proj/down_proj.
struct ExpertWeights {
  WeightView gate;  // [moe_intermediate_size, hidden]  (w1)
  WeightView up;    // [moe_intermediate_size, hidden]  (w3)
  WeightView down;  // [hidden, moe_intermediate_size]  (w2)
};

struct LayerWeights {
  WeightView input_norm;      // [hidden]
  WeightView post_attn_norm;  // [hidden]
  WeightView q_proj, k_proj, v_proj, o_proj;
  WeightView q_bias, k_bias, v_bias;  // Qwen2-MoE (qkv_bias); Qwen3-MoE/OLMoE attention_bias
  WeightView o_bias;                  // Qwen3-MoE/OLMoE attention_bias only
  WeightView q_norm, k_norm;          // Qwen3-MoE ([head_dim]) / OLMoE ([heads*head_dim])
  WeightView router;                  // [num_experts, hidden] gate (MoE layers)
  // Indexed by expert id; an expert not loaded in this process has null views.
  std::vector<ExpertWeights> experts;
  ExpertWeights shared_expert;    // Qwen2-MoE
  WeightView shared_expert_gate;  // [1, hidden]
  ExpertWeights dense_mlp;        // a layer without experts ([intermediate_size, hidden] ...)
};

struct ModelWeights {
  WeightView embed_tokens;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  WeightView final_norm;  // [hidden]
  WeightView lm_head;     // [vocab, hidden] (== embed_tokens when tied)
};

}  // namespace moe::model
