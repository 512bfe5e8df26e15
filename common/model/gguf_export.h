// HF MoE checkpoint -> GGUF for llama.cpp, as its convert_hf_to_gguf.py converts the four
// architectures (`moe export-gguf`; side-by-side benchmarks and the llama.cpp logits oracle,
// tests/llamacpp).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace moe::model::gguf {

struct ExportStats {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// Converts the checkpoint in `model_dir` (config.json, safetensors, tokenizer.json) to a GGUF at
// `out_path` for llama.cpp's architecture of the same model:
//   Mixtral   -> "llama" with experts; q/k rows permuted to its interleaved rotary layout
//   Qwen2-MoE -> "qwen2moe": q/k/v biases, shared expert ffn_{gate,up,down}_shexp and its
//                sigmoid gate ffn_gate_inp_shexp [hidden]; expert_(shared_)feed_forward_length
//   Qwen3-MoE -> "qwen3moe": attn_{q,k}_norm [head_dim] (per head)
//   OLMoE     -> "olmoe": attn_{q,k}_norm [hidden] (over the projection)
// The last three rotate halves (NEOX) as HF does, so q/k rows are stored as they are. Experts
// are stacked into 3-D ffn_{gate,up,down}_exps {hidden, ff, experts}; weights keep their dtype
// (F32 or BF16), norms, biases and routers are F32 (exact for BF16). Vocabulary from
// tokenizer.json: SentencePiece-style BPE (byte_fallback; every make-model preset) -> "llama",
// byte-level BPE -> "gpt2" with merges, pre-tokenizer "qwen2" (Qwen) or "olmo" (OLMoE).
// Unimplemented for F16 checkpoints and for what the llama.cpp graph of the arch cannot run
// (sliding window, dense layers, the other norm_topk_prob than its fixed one, o_proj bias,
// OLMoE clip_qkv or grouped-query attention), naming the feature.
absl::StatusOr<ExportStats> ExportGguf(const std::string& model_dir, const std::string& out_path);

}  // namespace moe::model::gguf
