// The ASR service's logic without gRPC (STYLE.md rule 1): streams of PCM in, speech events and
// transcripts out. Each stream holds a decoder from the pool, resamples its audio to the
// decoder's rate, feeds it in 20 ms frames, endpoints on the decoder's VAD (endpointer.h),
// emits partials with their stable prefix (stability.h) and finals.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<AsrStream> s, core.Open({.sample_rate_hz = 16000}));
//   std::vector<AsrEvent> events;
//   RETURN_IF_ERROR(s->Audio(pcm_bytes, &events));   // events appended in order
//   RETURN_IF_ERROR(s->Finish(&events));             // the last final
//
// Every bound is checked before work is done: the chunk size, the stream's total audio, the
// utterance length (endpointer), the grammar and keyword sizes; so a bad or endless stream
// costs bounded memory.
//
// Thread-safety: AsrCore is thread-safe; an AsrStream is used by one thread at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/audio/resampler.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "services/asr/core/asr_metrics.h"
#include "services/asr/core/asr_options.h"
#include "services/asr/core/decoder.h"
#include "services/asr/core/decoder_pool.h"
#include "services/asr/core/endpointer.h"
#include "services/asr/core/stability.h"

namespace moe::asr {

struct StreamConfig {
  int32_t sample_rate_hz = 16000;   // of the PCM that follows, in [8000, 48000]
  int32_t endpoint_silence_ms = 0;  // 0 = core.endpoint_silence; else [100, 5000]
  bool partial_results = false;
  bool manual_endpointing = false;
  std::string language;  // "" or an English tag ("en", "en-US", ...)
  RecognitionSpec spec;
};

struct AsrEvent {
  enum class Type { kPartial, kFinal, kSpeechStarted, kSpeechStopped };
  Type type = Type::kPartial;
  std::string text;  // partials and finals
  int32_t utterance_index = 0;
  int64_t start_ms = 0;       // audio time of the utterance's start
  int64_t end_ms = 0;         // kSpeechStopped, kFinal: its end of speech
  uint32_t stable_bytes = 0;  // partials: leading bytes of `text` that are stable
  uint32_t finalize_ms = 0;   // finals: endpoint decision -> final, server time
};

class AsrStream;

class AsrCore {
 public:
  // Everything borrowed must outlive the core and its streams.
  AsrCore(const AsrCoreOptions& options, std::unique_ptr<DecoderPool> pool, common::Clock& clock,
          common::metrics::Registry& registry);
  ~AsrCore();

  // A new stream. kInvalidArgument for a bad config (the message names the field),
  // kResourceExhausted when every decoder is busy.
  absl::StatusOr<std::unique_ptr<AsrStream>> Open(const StreamConfig& config);

  const AsrCoreOptions& options() const { return options_; }
  AsrMetrics& metrics() { return metrics_; }
  int free_decoders() const { return pool_->available(); }

 private:
  friend class AsrStream;
  // Adds one chunk's decoding to the realtime-factor window.
  void RecordDecoding(absl::Duration decoding, double audio_seconds);

  const AsrCoreOptions options_;
  const std::unique_ptr<DecoderPool> pool_;
  common::Clock& clock_;
  AsrMetrics metrics_;

  struct Sample {
    absl::Time at;
    double decoding_s;
    double audio_s;
  };
  absl::Mutex mu_;
  std::deque<Sample> window_ ABSL_GUARDED_BY(mu_);
  double window_decoding_s_ ABSL_GUARDED_BY(mu_) = 0;
  double window_audio_s_ ABSL_GUARDED_BY(mu_) = 0;
};

class AsrStream {
 public:
  ~AsrStream();
  AsrStream(const AsrStream&) = delete;
  AsrStream& operator=(const AsrStream&) = delete;

  // Decodes more PCM (mono s16le at the config's rate). kInvalidArgument: an odd byte count or
  // a chunk over core.max_chunk_bytes; kResourceExhausted: the stream passed
  // core.max_stream_audio. The stream is unusable after an error.
  absl::Status Audio(std::string_view pcm_s16le, std::vector<AsrEvent>* events);
  // Ends the current utterance now: kSpeechStopped (when speech was heard) and its final.
  absl::Status Finalize(std::vector<AsrEvent>* events);
  // Drops the current utterance (no final).
  absl::Status Discard(std::vector<AsrEvent>* events);
  // The end of the input: the rest of the audio, and the last utterance's final when speech
  // was heard.
  absl::Status Finish(std::vector<AsrEvent>* events);

  int64_t audio_ms() const { return samples_ * 1000 / decoder_->sample_rate(); }

 private:
  friend class AsrCore;
  AsrStream(AsrCore& core, const StreamConfig& config, DecoderLease decoder,
            std::unique_ptr<audio::Resampler> resampler);

  absl::Status Feed(std::span<const int16_t> samples, std::vector<AsrEvent>* events);
  absl::Status EndUtterance(bool speech_heard, std::vector<AsrEvent>* events);
  void MaybePartial(std::vector<AsrEvent>* events);

  AsrCore& core_;
  const StreamConfig config_;
  DecoderLease decoder_;
  const std::unique_ptr<audio::Resampler> resampler_;
  const int64_t max_samples_;
  Endpointer endpointer_;
  StabilityTracker stability_;
  std::vector<int16_t> resampled_;  // scratch
  std::vector<int16_t> frame_;      // samples waiting for a whole frame
  int64_t samples_ = 0;             // at the decoder's rate, fed so far
  int64_t next_partial_ms_ = 0;
  int32_t utterance_index_ = 0;
  std::string last_partial_;
  int last_stable_words_ = 0;
  bool failed_ = false;
};

// kInvalidArgument naming the field for a config the core cannot serve (rate, silence, language,
// grammar / keyword sizes).
absl::Status ValidateStreamConfig(const StreamConfig& config, const AsrCoreOptions& options);

}  // namespace moe::asr
