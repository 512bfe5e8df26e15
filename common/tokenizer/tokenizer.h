// A Hugging Face tokenizer loaded from tokenizer.json (+ tokenizer_config.json): byte-level BPE
// (GPT-2 / Llama-3 / Qwen) and SentencePiece-style BPE with byte fallback (Llama-2 / Mistral /
// Mixtral), added and special tokens, encode, decode, and (incremental_detokenizer.h) streaming
// decode. Encode/Decode follow HF tokenizers; tests compare ids against HF's own JS implementation.
//
//   ASSIGN_OR_RETURN(auto tok, Tokenizer::FromFile("/models/tiny"));
//   std::vector<int32_t> ids = tok->Encode("Hello world", /*add_special_tokens=*/true);
//   std::string text = tok->Decode(ids, /*skip_special_tokens=*/true);
//
// Thread-safe: all methods are const and may be called concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tokenizer/bpe_model.h"
#include "common/tokenizer/decoder.h"
#include "common/tokenizer/text_pipeline.h"

namespace moe::tokenizer {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;     // skipped by Decode(skip_special_tokens)
  bool lstrip = false;      // swallows whitespace on its left
  bool rstrip = false;      // swallows whitespace on its right
  bool normalized = false;  // matched in normalized text instead of raw text
};

struct DecodeOptions {
  bool skip_special_tokens = false;
  // HF's clean_up_tokenization (" ." -> "." ...). Off by default: streaming output cannot apply it.
  bool clean_up_tokenization_spaces = false;
};

class Tokenizer {
 public:
  // `path` is a model directory (tokenizer.json, optional tokenizer_config.json,
  // generation_config.json, chat_template.jinja) or a tokenizer.json file (its directory supplies
  // the others). Errors name the file and the field.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // From the file contents; `config_json`/`generation_config_json` may be empty.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(
      std::string_view tokenizer_json, std::string_view config_json,
      std::string_view generation_config_json = {}, std::string_view chat_template_file = {});

  // Token ids of `text` (invalid UTF-8 is first repaired to U+FFFD). Added and special tokens
  // written in the text are recognised. With `add_special_tokens`, the post-processor's tokens
  // (e.g. BOS) are added, or, when tokenizer.json has no template, those that
  // tokenizer_config.json's add_bos_token / add_eos_token ask for.
  //
  // With `parse_special_tokens` false, special tokens written in the text are encoded as plain
  // text (HF's split_special_tokens=true): use it for untrusted content such as user messages.
  // Non-special added tokens are still recognised.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens = true,
                              bool parse_special_tokens = true) const;

  // Text of `ids`; ids outside the vocabulary are skipped. Invalid UTF-8 produced by byte tokens
  // becomes U+FFFD (one per maximal invalid subsequence).
  std::string Decode(absl::Span<const int32_t> ids, bool skip_special_tokens = false) const;
  std::string Decode(absl::Span<const int32_t> ids, const DecodeOptions& options) const;

  // The token's string as stored in the vocabulary; nullopt for an unknown id.
  std::optional<std::string_view> IdToToken(int32_t id) const;
  std::optional<int32_t> TokenToId(std::string_view token) const;

  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  // -1 when the tokenizer has none.
  int32_t bos_id() const { return bos_id_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }
  // Every id that ends generation: eos_id() plus generation_config.json's eos_token_id(s).
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool IsEos(int32_t id) const;
  // Added tokens with special=true and tokenizer_config's additional_special_tokens.
  bool IsSpecial(int32_t id) const { return special_ids_.contains(id); }
  const std::vector<AddedToken>& added_tokens() const { return added_tokens_; }
  // The Jinja chat template from tokenizer_config.json (or chat_template.jinja); empty if none.
  const std::string& chat_template() const { return chat_template_; }
  // tokenizer_config.json's clean_up_tokenization_spaces (HF decode default), false if absent.
  bool clean_up_tokenization_spaces() const { return clean_up_tokenization_spaces_; }

  // For IncrementalDetokenizer: appends the raw bytes of token `id` (see TokenDecoder); returns
  // false (appending nothing) for unknown ids and, with `skip_special`, special tokens.
  bool AppendTokenBytes(int32_t id, bool is_first, bool skip_special, std::string* out) const;
  const TokenDecoder& decoder() const { return decoder_; }

 private:
  Tokenizer() = default;
  absl::Status Init(std::string_view tokenizer_json, std::string_view config_json,
                    std::string_view generation_config_json, std::string_view chat_template_file);
  void EncodeSection(std::string_view text, bool at_text_start, bool parse_special,
                     std::vector<int32_t>* out) const;
  void EncodeNormalized(const std::string& text, bool at_text_start,
                        std::vector<int32_t>* out) const;

  // Longest-match splitting of text around added tokens (a byte trie).
  struct Trie {
    struct Node {
      absl::flat_hash_map<unsigned char, int32_t> next;
      int32_t token = -1;  // index into added_tokens_
    };
    std::vector<Node> nodes{Node{}};
    void Insert(std::string_view s, int32_t token);
    // (start, end, token index or -1 for plain text) over `text`.
    struct Piece {
      size_t start, end;
      int32_t token;
    };
    std::vector<Piece> Split(std::string_view text) const;
  };
  struct Section {
    std::string_view text;
    int32_t token = -1;
  };
  std::vector<Section> SplitAdded(const Trie& trie, std::string_view text) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  TokenDecoder decoder_;
  std::string split_before_;  // cut words before this separator (see BpeModel::CanSplitBefore)

  std::vector<std::string> id_to_token_;
  std::vector<uint8_t> is_added_;
  std::vector<AddedToken> added_tokens_;
  // All added tokens, and the non-special ones only (for parse_special_tokens=false).
  Trie raw_trie_, normalized_trie_, raw_trie_plain_, normalized_trie_plain_;
  absl::flat_hash_map<std::string, int32_t> added_by_content_;
  absl::flat_hash_set<int32_t> special_ids_;

  std::vector<int32_t> prefix_ids_, suffix_ids_;  // added by add_special_tokens
  int32_t bos_id_ = -1, eos_id_ = -1, pad_id_ = -1;
  std::string bos_token_, eos_token_;
  std::vector<int32_t> eos_ids_;
  std::string chat_template_;
  bool clean_up_tokenization_spaces_ = false;
};

}  // namespace moe::tokenizer
