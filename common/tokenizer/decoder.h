// The decoder of a tokenizer.json, compiled to a per-token byte mapping plus sequence-level strips,
// so that whole-sequence decoding and incremental (streaming) decoding share one definition.
//
// Supported: ByteLevel, ByteFallback, Replace (String pattern), Metaspace, Strip, Fuse and Sequence
// of these; no decoder at all joins tokens with spaces. Decoding a sequence is
//   Utf8Lossy(strip(concat(AppendToken(token_i))))
// where strip removes up to strip_start() leading and strip_stop() trailing strip_content().
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::tokenizer {

class TokenDecoder {
 public:
  // `j` may be null (no decoder).
  static absl::StatusOr<TokenDecoder> Parse(const nlohmann::json& j, const std::string& where);

  // Appends the raw bytes of `token` (possibly an incomplete UTF-8 sequence) to `out`. `is_added`
  // marks added tokens (passed through ByteLevel unchanged); `is_first` is true for the first token
  // of the decoded sequence (after skipped specials are removed).
  void AppendToken(std::string_view token, bool is_added, bool is_first, std::string* out) const;

  const std::string& strip_content() const { return strip_content_; }
  int strip_start() const { return strip_start_; }
  int strip_stop() const { return strip_stop_; }

 private:
  struct Op {
    enum Kind { kReplace, kByteFallback, kByteLevel, kMetaspace, kStrip } kind;
    std::string from, to;      // kReplace: pattern/content; kMetaspace: replacement/" "
    bool strip_first = false;  // kMetaspace: drop the first token's leading space
    int start = 0, stop = 0;   // kStrip (per token)
  };
  absl::Status AddOps(const nlohmann::json& j, const std::string& where, bool* fused);

  std::vector<Op> ops_;
  bool no_decoder_ = false;  // join with " "
  std::string strip_content_;
  int strip_start_ = 0, strip_stop_ = 0;
};

}  // namespace moe::tokenizer
