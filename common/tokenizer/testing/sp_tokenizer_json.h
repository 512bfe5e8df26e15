// Hand-made SentencePiece-style (Mistral-like) tokenizer.json documents for tests that need a
// tokenizer without files: <unk> <s> </s> (ids 0..2, special), the 256 byte-fallback tokens
// <0x00>..<0xFF> (ids 3..258), then `pieces` (ids 259...) with `merges`; a Prepend/Replace "▁"
// normalizer, a BOS template post-processor and the matching decoder.
#pragma once

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace moe::tokenizer::testing {

inline constexpr char kSpacePiece[] = "\xE2\x96\x81";  // ▁

// tokenizer.json with the pieces above; merges are "left right" strings in priority order.
nlohmann::json SentencePieceTokenizerJson(const std::vector<std::string>& pieces,
                                          const std::vector<std::string>& merges);

// tokenizer_config.json: bos <s>, eos </s>, add_bos_token, and `chat_template`.
nlohmann::json SentencePieceConfigJson(const std::string& chat_template);

}  // namespace moe::tokenizer::testing
