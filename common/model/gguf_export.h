// Mixtral checkpoint -> GGUF for llama.cpp's "llama" architecture with experts, as llama.cpp's
// convert_hf_to_gguf.py does for MixtralForCausalLM (`moe export-gguf`, side-by-side benchmarks).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace moe::model::gguf {

struct ExportStats {
  int64_t tensors = 0;
  int64_t bytes = 0;
};

// Converts the Mixtral checkpoint in `model_dir` (config.json, safetensors, tokenizer.json) to a
// GGUF at `out_path` for llama.cpp's "llama" architecture: experts stacked into 3-D
// ffn_{gate,up,down}_exps, q/k rows permuted to llama.cpp's interleaved rotary layout, weights in
// their stored dtype (F32 or BF16), norms and the router gate in F32 (exact for BF16), and a
// SentencePiece-style ("llama") vocabulary from tokenizer.json. Unimplemented for other
// architectures or F16 checkpoints.
absl::StatusOr<ExportStats> ExportGgufLlama(const std::string& model_dir,
                                            const std::string& out_path);

}  // namespace moe::model::gguf
