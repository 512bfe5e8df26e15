// Deterministic SentencePiece-style (Mistral-like) BPE tokenizers with byte fallback for the
// `moe make-model` presets (DESIGN.md §6: vocab 512 tiny, 1024 small, 32000 bench).
//
// Vocabulary: <unk>=0, <s>=1, </s>=2, the 256 byte tokens <0x00>..<0xFF> (ids 3..258), the most
// frequent characters of the embedded corpus (preset_corpus.h; "▁" stands for a space), then BPE
// merges learned on that corpus (most frequent pair first, ties by token text). When the corpus
// runs out of pairs (every corpus word is one token), merges continue deterministically over pairs
// of existing tokens (diagonal order over the token list, the right part never starting with "▁")
// until the vocabulary has exactly `vocab_size` tokens. Same inputs, same bytes.
//
// Files: tokenizer.json (normalizer Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer,
// TemplateProcessing adding <s>, decoder Replace/ByteFallback/Fuse/Strip, as Mistral/Mixtral ship)
// and tokenizer_config.json (bos/eos/unk, add_bos_token=true, a Mistral [INST] chat_template).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::tokenizer {

struct PresetTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

// The smallest vocabulary a preset tokenizer can have (specials, bytes, a minimal alphabet).
inline constexpr int64_t kMinPresetVocab = 300;

// `arch` is the model family ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe"); all use the same
// tokenizer and template today. `model_max_length` goes into tokenizer_config.json.
absl::StatusOr<PresetTokenizerFiles> BuildPresetTokenizer(int64_t vocab_size,
                                                          const std::string& arch,
                                                          int64_t model_max_length = 4096);

// Builds the files and writes them into `out_dir` (created if missing).
absl::Status WritePresetTokenizer(const std::string& out_dir, int64_t vocab_size,
                                  const std::string& arch, int64_t model_max_length = 4096);

// The chat template written into preset tokenizer_config.json files.
const char* PresetChatTemplate();

}  // namespace moe::tokenizer
