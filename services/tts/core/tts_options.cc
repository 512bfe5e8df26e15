#include "services/tts/core/tts_options.h"

#include "absl/strings/str_cat.h"

namespace moe::tts {

void TtsCoreOptions::Describe(common::config::Schema<TtsCoreOptions>& s) {
  s.Add("max_streams", &TtsCoreOptions::max_streams, "streams at once").Range(1, 4096);
  s.Add("first_chunk_min_chars", &TtsCoreOptions::first_chunk_min_chars,
        "a clause boundary cuts the first segment after this many bytes")
      .Range(1, 4096);
  s.Add("first_chunk_max_chars", &TtsCoreOptions::first_chunk_max_chars,
        "length cap of the first segment, bytes")
      .Range(8, 4096);
  s.Add("max_segment_chars", &TtsCoreOptions::max_segment_chars,
        "length cap of later segments, bytes")
      .Range(16, 16384);
  s.Add("chunk", &TtsCoreOptions::chunk, "audio per response message")
      .Range(absl::Milliseconds(10), absl::Seconds(5));
  s.Add("max_stream_text_bytes", &TtsCoreOptions::max_stream_text_bytes,
        "text one stream may carry, bytes")
      .Range(1, int64_t{1} << 30);
  s.Add("default_voice", &TtsCoreOptions::default_voice, "voice when a stream names none")
      .NonEmpty();
}

absl::Status TtsCoreOptions::Validate() const {
  if (absl::Status s = common::config::CheckFields(*this); !s.ok()) return s;
  if (first_chunk_min_chars > first_chunk_max_chars) {
    return absl::InvalidArgumentError(absl::StrCat("first_chunk_min_chars: ", first_chunk_min_chars,
                                                   " is above first_chunk_max_chars (",
                                                   first_chunk_max_chars, ")"));
  }
  return absl::OkStatus();
}

}  // namespace moe::tts
