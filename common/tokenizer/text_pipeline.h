// Normalizers and pre-tokenizers of a Hugging Face tokenizer.json, parsed from their JSON blocks.
//
// Supported normalizers: Sequence, Prepend, Replace (String or Regex pattern), NFC, NFD, NFKC,
// NFKD, Lowercase, Strip. Supported pre-tokenizers: Sequence, Split (all five behaviours, invert),
// ByteLevel (add_prefix_space, use_regex with the GPT-2 pattern), Metaspace (replacement,
// prepend_scheme, split), Digits. Anything else is an Unimplemented error naming the field.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `text` is valid UTF-8; so is the result.
  virtual std::string Normalize(std::string text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by the pieces it splits into (empty pieces are dropped). `at_text_start`
  // is true when the pieces come from the first section of the input (Metaspace "first").
  virtual void PreTokenize(std::vector<std::string>* pieces, bool at_text_start) const = 0;
};

// `where` names the JSON location for error messages, e.g. "tokenizer.json: normalizer".
// A JSON null yields nullptr (no normalizer / pre-tokenizer).
absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j,
                                                            const std::string& where);
absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& j,
                                                                const std::string& where);

// Reads a tokenizer.json pattern object ({"String": s} or {"Regex": r}) into a PCRE2 pattern.
absl::StatusOr<std::string> ParsePattern(const nlohmann::json& j, const std::string& where);

}  // namespace moe::tokenizer
