// Which tensors a Hugging Face checkpoint of a given ModelConfig holds: their names (per
// architecture), shapes, and where each one goes in ModelWeights.
//
//   Mixtral   model.layers.L.block_sparse_moe.gate / .experts.E.{w1,w3,w2}
//   Qwen2-MoE model.layers.L.mlp.gate / .experts.E.{gate,up,down}_proj / .shared_expert.* /
//             .shared_expert_gate; self_attn.{q,k,v}_proj.bias
//   Qwen3-MoE self_attn.{q,k}_norm [head_dim]; mlp.gate / mlp.experts.E.*
//   OLMoE     self_attn.q_norm [heads*head_dim], k_norm [kv_heads*head_dim]; mlp.*
// plus model.embed_tokens, model.norm, lm_head (absent when tie_word_embeddings), per layer
// input_layernorm, post_attention_layernorm, self_attn.{q,k,v,o}_proj, and dense layers'
// mlp.{gate,up,down}_proj.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/weights.h"

namespace moe::model {

enum class TensorRole : uint8_t {
  kEmbed,
  kFinalNorm,
  kLmHead,
  kInputNorm,
  kPostAttnNorm,
  kQProj,
  kKProj,
  kVProj,
  kOProj,
  kQBias,
  kKBias,
  kVBias,
  kOBias,
  kQNorm,
  kKNorm,
  kRouter,
  kExpertGate,
  kExpertUp,
  kExpertDown,
  kSharedGate,
  kSharedUp,
  kSharedDown,
  kSharedExpertGate,
  kDenseGate,
  kDenseUp,
  kDenseDown,
};

// True for the roles an expert worker holds (routed experts); all others are "dense".
inline bool IsExpertRole(TensorRole r) {
  return r == TensorRole::kExpertGate || r == TensorRole::kExpertUp || r == TensorRole::kExpertDown;
}

// Whether WeightsMode::kQ8_0 quantizes a tensor of this role (weights.h: the projections and
// lm_head; not the router gates, embeddings, norms or biases).
bool QuantizedInQ8Mode(TensorRole r);

struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;  // HF shape: [out, in] for Linear weights, [n] for norms/biases
  TensorRole role;
  int64_t layer = -1;   // -1: not per-layer
  int64_t expert = -1;  // routed experts only
};

// Every tensor the checkpoint holds, in a canonical order: embed_tokens, then per layer
// (norms, attention, router, experts 0..E-1, shared expert, dense MLP), then norm, lm_head.
std::vector<TensorSlot> CheckpointTensors(const ModelConfig& config);

// The HF name of one routed expert's projection (role kExpertGate/Up/Down).
std::string ExpertTensorName(const ModelConfig& config, int64_t layer, int64_t expert,
                             TensorRole role);

// Where `slot` lives in `weights` (layers/experts vectors must already be sized).
WeightView* SlotView(ModelWeights& weights, const TensorSlot& slot);
WeightView* SlotView(ExpertWeights& expert, TensorRole role);

}  // namespace moe::model
