// Deterministic random Hugging Face checkpoints for tests and benchmarks (DESIGN.md §6 presets):
// config.json as save_pretrained writes it, model.safetensors (sharded with an index past
// max_shard_bytes), generation_config.json and the preset tokenizer files.
//
// Same options -> byte-identical files. Each tensor's values come from its own counter-based
// stream (splitmix64 keyed by seed and tensor name), so generation order does not matter.
//
// Scales are chosen so that the random model behaves like a trained one in the ways tests need:
//  - attention is peaky and positional: q/k weights (or, with q/k norms, the norm weights) give
//    attention scores a standard deviation of about 4, so changing an early token changes later
//    logits clearly;
//  - greedy decoding has clear top-1 margins: lm_head makes logits spread with std about 6;
//  - every layer's attention and FFN outputs are about as large as the residual stream.
// gate_skew (Zipf exponent S > 0) reserves the last hidden channel as a constant that only the
// routers read: embeddings hold kSkewChannelValue there, no layer writes it (zero rows in o_proj
// and the down projections) and no projection but the routers reads it (zero columns in q/k/v,
// the FFN gate/up projections and lm_head). After post_attention_layernorm it is a near-constant
// router input, and the router column for it adds about -S*ln(rank) to each expert's logit
// (rank = a seeded per-layer permutation of the experts, GateSkewRanks). Expert load then falls
// with rank close to Zipf(S) (measured in reference_forward_test.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/model_config.h"

namespace moe::model {

enum class Preset : uint8_t { kTiny, kSmall, kBench };

absl::StatusOr<Preset> ParsePreset(std::string_view name);  // "tiny", "small", "bench"
std::string_view PresetName(Preset preset);

struct MakeModelOptions {
  Preset preset = Preset::kTiny;
  Arch arch = Arch::kMixtral;
  common::DType dtype = common::DType::kF32;
  double gate_skew = 0;  // Zipf exponent S; 0 = unbiased gates
  uint64_t seed = 0;
  // num_key_value_heads; 0 = the preset's (2 tiny/small, 4 bench). Equal to the preset's 4 (tiny)
  // heads gives an OLMoE that llama.cpp's olmoe graph can run (its k_norm is [n_embd]: no GQA).
  int64_t kv_heads = 0;
  // Shard past this many bytes of tensor data per file (HF's default max_shard_size, 5 GB).
  int64_t max_shard_bytes = 5'000'000'000;
  // Called as tensor data is written: (bytes done, bytes total). May be empty.
  std::function<void(int64_t, int64_t)> progress;

  absl::Status Validate() const;
};

// The value of the constant channel (hidden_size - 1) in every embedding when gate_skew > 0.
inline constexpr float kSkewChannelValue = 4.0f;

// The ModelConfig of a preset (sizes of DESIGN.md §6; 8 experts, top-2; Qwen2-MoE with a shared
// expert of 2 x intermediate and qkv bias; Qwen3-MoE/OLMoE with q/k norms).
ModelConfig PresetConfig(Preset preset, Arch arch, common::DType dtype);
// The preset's config with the options' overrides (kv_heads).
ModelConfig PresetConfig(const MakeModelOptions& options);

// config.json text for `config`: every field of the HF configuration class of its architecture
// with its value, sorted keys, indent 2, as transformers' save_pretrained writes it.
std::string ConfigJson(const ModelConfig& config);
// generation_config.json text (bos/eos/pad of `config`).
std::string GenerationConfigJson(const ModelConfig& config);

// The expert rank order of `layer` used by gate_skew: rank_of[expert] in 1..num_experts.
std::vector<int64_t> GateSkewRanks(const MakeModelOptions& options, int64_t layer);

// Writes the checkpoint into `out_dir` (created if needed; existing files are overwritten).
absl::Status MakeModel(const MakeModelOptions& options, const std::string& out_dir);

}  // namespace moe::model
