// The TTS service's logic without gRPC (STYLE.md rule 1): streamed text in, PCM chunks out.
// A stream segments its text (text_segmenter.h), has each segment synthesized as soon as it is
// complete, resamples to the stream's rate (libsoxr) and hands the audio out in chunks of
// core.chunk, each segment's first chunk with the segment's text and its latency.
//
//   ASSIGN_OR_RETURN(auto s, core.Open({.voice = "alloy", .sample_rate_hz = 24000}));
//   RETURN_IF_ERROR(s->Text("Hello there. How", /*flush=*/false, sink));  // "Hello there."
//   RETURN_IF_ERROR(s->Finish(sink));                                      // "How"
//
// The engine makes a whole segment before its audio is handed out: espeak-ng has one global
// synthesizer, and a sink that blocks (a slow client, gRPC flow control) must never hold it
// (espeak makes ~500x real time: a 48-byte first segment takes ~3 ms).
//
// Thread-safety: TtsCore is thread-safe; a TtsStream is used by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/audio/resampler.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "services/tts/core/synthesizer.h"
#include "services/tts/core/text_segmenter.h"
#include "services/tts/core/tts_metrics.h"
#include "services/tts/core/tts_options.h"

namespace moe::tts {

struct StreamConfig {
  std::string voice;           // "" = core.default_voice
  int32_t sample_rate_hz = 0;  // 0 = the engine's; else [8000, 48000]
  float speed = 0;             // 0 = 1.0; else [0.25, 4.0]
};

struct AudioChunk {
  std::string pcm_s16le;
  int32_t sample_rate_hz = 0;
  int32_t segment_index = 0;
  bool end_of_segment = false;
  std::string text;                 // a segment's first chunk: the segment
  uint32_t segment_latency_ms = 0;  // a segment's first chunk: segment complete -> this chunk
};
// Receives a stream's audio in order; false = stop (the client is gone).
using ChunkSink = std::function<bool(AudioChunk)>;

class TtsStream;

class TtsCore {
 public:
  // `synthesizer`, `clock` and `registry` must outlive the core and its streams.
  TtsCore(const TtsCoreOptions& options, SpeechSynthesizer& synthesizer, common::Clock& clock,
          common::metrics::Registry& registry);

  // kInvalidArgument naming the field (voice, sample_rate_hz, speed); kResourceExhausted past
  // core.max_streams.
  absl::StatusOr<std::unique_ptr<TtsStream>> Open(const StreamConfig& config);

  const TtsCoreOptions& options() const { return options_; }
  int32_t native_rate() const { return synthesizer_.sample_rate(); }

 private:
  friend class TtsStream;
  const TtsCoreOptions options_;
  SpeechSynthesizer& synthesizer_;
  common::Clock& clock_;
  TtsMetrics metrics_;
  std::atomic<int32_t> open_{0};
};

class TtsStream {
 public:
  ~TtsStream();
  TtsStream(const TtsStream&) = delete;
  TtsStream& operator=(const TtsStream&) = delete;

  // Appends text (any split, even inside a UTF-8 character); speaks the segments it completes
  // (all of it with `flush`). kInvalidArgument past core.max_stream_text_bytes; kCancelled when
  // the sink said stop.
  absl::Status Text(std::string_view text, bool flush, const ChunkSink& sink);
  // Speaks what is left. Call once, at the end of the text.
  absl::Status Finish(const ChunkSink& sink);

  int32_t sample_rate_hz() const { return rate_; }

 private:
  friend class TtsCore;
  TtsStream(TtsCore& core, VoiceSettings voice, int32_t rate,
            std::unique_ptr<audio::Resampler> resampler);
  absl::Status Speak(const std::string& segment, absl::Time ready, const ChunkSink& sink);

  TtsCore& core_;
  const VoiceSettings voice_;
  const int32_t rate_;
  const std::unique_ptr<audio::Resampler> resampler_;
  TextSegmenter segmenter_;
  int64_t text_bytes_ = 0;
  int32_t next_segment_ = 0;
  std::vector<int16_t> native_;     // scratch: one segment at the engine's rate
  std::vector<int16_t> resampled_;  // scratch
};

}  // namespace moe::tts
