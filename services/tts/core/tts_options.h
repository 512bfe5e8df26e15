// The TTS core's configuration (section `core:`; `tts --help` lists it).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "services/tts/core/text_segmenter.h"

namespace moe::tts {

struct TtsCoreOptions {
  int32_t max_streams = 32;  // streams at once; past it RESOURCE_EXHAUSTED
  // Segmenting (text_segmenter.h). The first-chunk cap decides how soon audio starts when the
  // text has no early sentence or clause end (an LLM's first sentence can be long).
  int32_t first_chunk_min_chars = 16;
  int32_t first_chunk_max_chars = 48;
  int32_t max_segment_chars = 240;
  // Audio per response message (smaller: earlier first bytes, more messages).
  absl::Duration chunk = absl::Milliseconds(100);
  // Text one stream may carry in all, bytes (INVALID_ARGUMENT past it).
  int64_t max_stream_text_bytes = 256 << 10;
  std::string default_voice = "en-us";

  SegmenterOptions segmenter() const {
    return {.first_min_chars = first_chunk_min_chars,
            .first_max_chars = first_chunk_max_chars,
            .max_chars = max_segment_chars};
  }
  static void Describe(common::config::Schema<TtsCoreOptions>& s);
  absl::Status Validate() const;
};

}  // namespace moe::tts
