// A tokenizer's vocabulary as the grammar sees it, computed once per tokenizer: each token's
// bytes as the gateway's detokenizer renders them (tokenizer::IncrementalDetokenizer with
// skip_special_tokens), a byte trie over all text tokens (masks are computed by walking it, so
// tokens sharing a prefix share the work), and the ids that end generation.
//
// Text tokens: every id below the tokenizer's size that is not special and renders to at least
// one byte. Byte-level BPE tokens (Qwen, Llama 3) and SentencePiece byte-fallback tokens
// (Llama 2, Mistral, the presets) both render to bytes, possibly a partial UTF-8 character.
// Position matters for SentencePiece decoders: the first token of an output may render without
// its leading space (Metaspace's prepend_scheme, a Strip decoder), so first_text() holds the
// first-position rendering and strip_content()/strip_start() the sequence-level strip the
// detokenizer applies to the output's start.
//
// Thread-safe: immutable after construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/tokenizer.h"

namespace moe::grammar {

class TokenVocabulary {
 public:
  // Byte trie in CSR form: node 0 is the root; the edges of node n are
  // [edge_begin[n], edge_begin[n + 1]) in ascending byte order; the tokens whose text ends at node
  // n are tokens[token_begin[n] .. token_begin[n + 1]).
  struct Trie {
    std::vector<int32_t> edge_begin;   // [num_nodes + 1]
    std::vector<uint8_t> edge_byte;    // [num_edges]
    std::vector<int32_t> edge_child;   // [num_edges]
    std::vector<int32_t> token_begin;  // [num_nodes + 1]
    std::vector<int32_t> tokens;       // [num_text_tokens]
    int64_t num_nodes() const { return static_cast<int64_t>(edge_begin.size()) - 1; }
  };

  // `model_vocab_size`: the logits' width (may exceed the tokenizer's; the extra ids are never
  // allowed). `eos_ids`: the ids that end generation (the router's EOS list), added to the
  // tokenizer's own. kInvalidArgument when model_vocab_size < 1.
  static absl::StatusOr<std::shared_ptr<const TokenVocabulary>> FromTokenizer(
      const tokenizer::Tokenizer& tokenizer, int64_t model_vocab_size,
      absl::Span<const int32_t> eos_ids);
  // For tests: texts[id] ("" = not a text token), the end ids, optional first-position texts
  // (empty = same as texts) and sequence-level strip.
  static std::shared_ptr<const TokenVocabulary> FromTexts(std::vector<std::string> texts,
                                                          std::vector<int32_t> eos_ids,
                                                          std::vector<std::string> first_texts = {},
                                                          std::string strip_content = "",
                                                          int strip_start = 0);

  int64_t size() const { return size_; }  // bits in a mask
  bool is_text(int32_t id) const {
    return id >= 0 && id < size_ && !texts_[static_cast<size_t>(id)].empty();
  }
  const std::string& text(int32_t id) const { return texts_[static_cast<size_t>(id)]; }
  const std::string& first_text(int32_t id) const {
    return first_texts_.empty() ? texts_[static_cast<size_t>(id)]
                                : first_texts_[static_cast<size_t>(id)];
  }
  // True when some token renders differently as the first token of an output.
  bool first_differs() const { return !first_texts_.empty(); }
  // True when the first output token or the output's start render differently (see above).
  bool position_dependent() const { return first_differs() || strip_start_ > 0; }
  const std::string& strip_content() const { return strip_content_; }
  int strip_start() const { return strip_start_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool IsEos(int32_t id) const;
  const Trie& trie() const { return trie_; }
  int64_t num_text_tokens() const { return static_cast<int64_t>(trie_.tokens.size()); }

 private:
  TokenVocabulary() = default;
  void BuildTrie();

  int64_t size_ = 0;
  std::vector<std::string> texts_;        // [size]
  std::vector<std::string> first_texts_;  // [size] or empty when equal to texts_
  std::string strip_content_;
  int strip_start_ = 0;
  std::vector<int32_t> eos_ids_;  // sorted, unique
  Trie trie_;
};

}  // namespace moe::grammar
