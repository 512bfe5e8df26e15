// Cuts streamed text (LLM tokens, in any split) into the segments TTS speaks: each sentence as
// soon as it is complete, and the first segment earlier, at a clause boundary (, ; :) once it
// has first_min_chars, or at first_max_chars (at the last space before it) when no boundary
// comes: the first audio then never waits for a long first sentence. Later segments are cut at
// max_chars too, so the buffer is bounded whatever the text.
//
// A sentence ends at . ! ? (closing quotes or brackets may follow) followed by white space, or
// at a newline; a boundary at the very end of the buffered text waits for the next character
// ("3." may become "3.5"). Cuts never split a UTF-8 character. Segments are trimmed; empty ones
// are dropped.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moe::tts {

struct SegmenterOptions {
  int32_t first_min_chars = 16;  // a clause boundary cuts the first segment only after this
  int32_t first_max_chars = 48;  // the first segment's length cap, bytes
  int32_t max_chars = 240;       // every later segment's length cap, bytes
};

class TextSegmenter {
 public:
  explicit TextSegmenter(const SegmenterOptions& options) : options_(options) {}

  // Appends `text`; the segments it completed go to `out`.
  void Append(std::string_view text, std::vector<std::string>* out);
  // Everything buffered, as one segment.
  void Flush(std::vector<std::string>* out);

  size_t buffered_bytes() const { return buffer_.size(); }
  int segments_emitted() const { return emitted_; }

 private:
  // Where the next segment ends in buffer_ (one past it), or npos.
  size_t FindCut() const;
  void Emit(size_t end, std::vector<std::string>* out);

  const SegmenterOptions options_;
  std::string buffer_;
  int emitted_ = 0;
};

}  // namespace moe::tts
