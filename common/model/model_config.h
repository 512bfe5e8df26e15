// The architecture of a Mixture-of-Experts decoder, parsed from a Hugging Face config.json.
//
// ParseModelConfig follows the HF configuration classes (transformers 4.51-4.57, with the v5
// spellings `dtype` and `rope_parameters` accepted too): the field names and the per-class
// defaults of MixtralConfig, Qwen2MoeConfig, Qwen3MoeConfig and OlmoeConfig, and the derived
// values their modeling code computes (head_dim, kv heads, which layers are sparse).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor/dtype.h"

namespace moe::model {

enum class Arch : uint8_t { kMixtral, kQwen2Moe, kQwen3Moe, kOlmoe };

// "MixtralForCausalLM" <-> kMixtral, ...; model_type "mixtral", "qwen2_moe", "qwen3_moe", "olmoe".
absl::StatusOr<Arch> ArchFromArchitecture(std::string_view architecture);
absl::StatusOr<Arch> ArchFromModelType(std::string_view model_type);
std::string_view ArchitectureName(Arch arch);  // "MixtralForCausalLM", ...
std::string_view ModelTypeName(Arch arch);     // "mixtral", ...

// Plain data. Field names follow HF config.json where one exists.
struct ModelConfig {
  Arch arch = Arch::kMixtral;
  std::string architecture;                   // "MixtralForCausalLM", ...
  std::string model_type;                     // "mixtral", "qwen2_moe", "qwen3_moe", "olmoe"
  common::DType dtype = common::DType::kF32;  // torch_dtype of the stored weights

  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json says otherwise
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2-MoE: qkv_bias, true)
  bool o_proj_bias = false;     // o_proj carries a bias (Qwen3-MoE/OLMoE attention_bias)
  // Per-head RMSNorm of q and k (Qwen3-MoE: over head_dim) or over the whole projection
  // (OLMoE: over num_heads*head_dim for q, num_kv_heads*head_dim for k).
  bool qk_norm = false;
  bool qk_norm_per_head = false;
  double clip_qkv = 0;         // OLMoE: clamp q, k, v to [-clip_qkv, clip_qkv] (0 = none)
  int64_t sliding_window = 0;  // Mixtral: a query at i sees keys j with i - j < window (0 = all)

  // Mixture of experts.
  int64_t num_experts = 0;            // num_local_experts (Mixtral) / num_experts
  int64_t num_experts_per_tok = 0;    // top-k
  int64_t moe_intermediate_size = 0;  // per-expert FFN width (Mixtral/OLMoE: intermediate_size)
  bool norm_topk_prob = true;         // renormalise the top-k gate weights (Mixtral: always)
  // Qwen2-MoE shared expert (0 = none), gated by sigmoid(shared_expert_gate · x).
  int64_t shared_expert_intermediate_size = 0;
  // Layers that are dense MLP instead of MoE (Qwen: mlp_only_layers, decoder_sparse_step).
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t intermediate_size = 0;  // dense MLP width where a layer is dense

  int64_t bos_token_id = -1;  // -1: none
  int64_t eos_token_id = -1;  // the first of eos_token_ids (-1: none)
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;

  // True when layer `layer_idx` has experts (else a dense MLP of intermediate_size).
  bool IsMoeLayer(int64_t layer_idx) const {
    for (int64_t l : mlp_only_layers) {
      if (l == layer_idx) return false;
    }
    return num_experts > 0 && decoder_sparse_step > 0 && (layer_idx + 1) % decoder_sparse_step == 0;
  }
  int64_t q_size() const { return num_attention_heads * head_dim; }
  int64_t kv_size() const { return num_key_value_heads * head_dim; }

  // Consistency of the sizes (positive, heads divisible by kv heads, top-k <= experts, even
  // head_dim, ...). InvalidArgument naming the field.
  absl::Status Validate() const;
};

// Parses config.json text. Unknown architecture, unsupported hidden_act / rope scaling /
// sliding-window layout, or a malformed field -> InvalidArgument (Unimplemented for features
// not supported), naming the field. `source` names the file in messages.
absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text,
                                             std::string_view source = "config.json");

// Reads `<dir>/config.json` (or `path` itself when it names a file).
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

}  // namespace moe::model
