// The ASR core's configuration (section `core:` of the service's YAML; `asr --help` lists it).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"

namespace moe::asr {

struct AsrCoreOptions {
  // Streams decoded at once = decoders made at start (each holds the acoustic and language
  // model: ~0.3 s to load, ~20 MB for en-us). Past it a new stream gets RESOURCE_EXHAUSTED.
  int32_t max_streams = 4;
  // Pause after speech that ends an utterance when the client sets none.
  absl::Duration endpoint_silence = absl::Milliseconds(300);
  // Audio between partial transcripts while speech goes on (each costs a backtrace).
  absl::Duration partial_interval = absl::Milliseconds(100);
  // A word of a partial is stable once it survived this much audio of revisions.
  absl::Duration stability_window = absl::Milliseconds(300);
  // An utterance this long is ended where it is: bounds the decoder's memory for a stream
  // that never pauses (a 10-minute monologue decodes as 20 utterances).
  absl::Duration max_utterance = absl::Seconds(30);
  // Audio one stream may carry in all; past it the stream ends with RESOURCE_EXHAUSTED.
  absl::Duration max_stream_audio = absl::Minutes(60);
  // Largest AudioChunk, bytes (INVALID_ARGUMENT past it; the gRPC message limit also applies).
  int32_t max_chunk_bytes = 1 << 20;
  int32_t max_grammar_bytes = 64 << 10;
  int32_t max_keywords = 256;
  // Span of the moe_asr_realtime_factor gauge.
  absl::Duration realtime_factor_window = absl::Seconds(10);

  static void Describe(common::config::Schema<AsrCoreOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

}  // namespace moe::asr
