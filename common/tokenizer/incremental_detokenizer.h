// Streaming detokenization: turns token ids, one at a time, into text deltas that never end in a
// broken UTF-8 sequence. Incomplete bytes (e.g. the first byte token of a multi-byte character) are
// held back until the character completes. The concatenation of all deltas, Finish() included,
// equals Tokenizer::Decode(all ids, skip_special_tokens) (clean-up of tokenization spaces off).
//
//   IncrementalDetokenizer detok(*tok, /*skip_special_tokens=*/true);
//   for (int32_t id : stream) Send(detok.Add(id));
//   Send(detok.Finish());
//
// Not thread-safe; one per sequence. The tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/unicode.h"

namespace moe::tokenizer {

class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);

  // Text completed by `id` (possibly empty).
  std::string Add(int32_t id);
  // Flushes held-back bytes (as U+FFFD) and held-back trailing strip characters' fate; call once
  // at the end of the stream.
  std::string Finish();
  // All text returned so far.
  const std::string& text() const { return text_; }
  // True while bytes or characters are held back.
  bool has_pending() const { return utf8_.has_pending() || !held_.empty(); }

 private:
  std::string Emit(std::string s);

  const Tokenizer& tokenizer_;
  bool skip_special_;
  bool first_ = true;   // no token emitted yet
  int strip_left_ = 0;  // leading strip characters still to drop
  StreamingUtf8Decoder utf8_;
  std::string held_;  // trailing strip characters held back (strip_stop > 0)
  std::string text_;
};

}  // namespace moe::tokenizer
