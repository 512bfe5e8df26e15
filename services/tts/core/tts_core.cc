#include "services/tts/core/tts_core.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/audio/pcm.h"

namespace moe::tts {

TtsCore::TtsCore(const TtsCoreOptions& options, SpeechSynthesizer& synthesizer,
                 common::Clock& clock, common::metrics::Registry& registry)
    : options_(options), synthesizer_(synthesizer), clock_(clock), metrics_(registry) {}

absl::StatusOr<std::unique_ptr<TtsStream>> TtsCore::Open(const StreamConfig& config) {
  auto invalid = [this](absl::Status s) {
    metrics_.rejected_total.Add({{"reason", "invalid"}}).Increment();
    return s;
  };
  const int32_t rate =
      config.sample_rate_hz == 0 ? synthesizer_.sample_rate() : config.sample_rate_hz;
  if (rate < 8000 || rate > 48000) {
    return invalid(absl::InvalidArgumentError(
        absl::StrCat("sample_rate_hz: ", config.sample_rate_hz, " is not in [8000, 48000]")));
  }
  const float speed = config.speed == 0 ? 1.0f : config.speed;
  if (!(speed >= 0.25f && speed <= 4.0f)) {
    return invalid(
        absl::InvalidArgumentError(absl::StrCat("speed: ", config.speed, " is not in [0.25, 4]")));
  }
  VoiceSettings voice{.voice = config.voice.empty() ? options_.default_voice : config.voice,
                      .speed = speed};
  if (absl::Status s = synthesizer_.CheckVoice(voice.voice); !s.ok()) return invalid(s);
  if (open_.fetch_add(1) >= options_.max_streams) {
    open_.fetch_sub(1);
    metrics_.rejected_total.Add({{"reason", "busy"}}).Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat("all ", options_.max_streams, " streams are in use (core.max_streams)"));
  }
  absl::StatusOr<std::unique_ptr<audio::Resampler>> resampler =
      audio::Resampler::Create(synthesizer_.sample_rate(), rate);
  if (!resampler.ok()) {
    open_.fetch_sub(1);
    return resampler.status();
  }
  metrics_.streams_total.Increment();
  metrics_.streams_active.Increment();
  return std::unique_ptr<TtsStream>(
      new TtsStream(*this, std::move(voice), rate, *std::move(resampler)));
}

TtsStream::TtsStream(TtsCore& core, VoiceSettings voice, int32_t rate,
                     std::unique_ptr<audio::Resampler> resampler)
    : core_(core),
      voice_(std::move(voice)),
      rate_(rate),
      resampler_(std::move(resampler)),
      segmenter_(core.options().segmenter()) {}

TtsStream::~TtsStream() {
  core_.open_.fetch_sub(1);
  core_.metrics_.streams_active.Decrement();
}

absl::Status TtsStream::Text(std::string_view text, bool flush, const ChunkSink& sink) {
  text_bytes_ += static_cast<int64_t>(text.size());
  if (text_bytes_ > core_.options().max_stream_text_bytes) {
    core_.metrics_.rejected_total.Add({{"reason", "too_long"}}).Increment();
    return absl::InvalidArgumentError(absl::StrCat("text: the stream passed its limit of ",
                                                   core_.options().max_stream_text_bytes,
                                                   " bytes (core.max_stream_text_bytes)"));
  }
  std::vector<std::string> segments;
  segmenter_.Append(text, &segments);
  if (flush) segmenter_.Flush(&segments);
  const absl::Time ready = core_.clock_.Now();
  for (const std::string& s : segments) {
    if (absl::Status st = Speak(s, ready, sink); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status TtsStream::Finish(const ChunkSink& sink) { return Text("", /*flush=*/true, sink); }

absl::Status TtsStream::Speak(const std::string& segment, absl::Time ready, const ChunkSink& sink) {
  native_.clear();
  const absl::Time start = core_.clock_.Now();
  absl::Status s =
      core_.synthesizer_.Synthesize(segment, voice_, [this](std::span<const int16_t> pcm) {
        native_.insert(native_.end(), pcm.begin(), pcm.end());
        return true;
      });
  if (!s.ok()) return s;
  core_.metrics_.stage_tts_seconds.Observe(absl::ToDoubleSeconds(core_.clock_.Now() - start));
  core_.metrics_.segments_total.Increment();
  resampled_.clear();
  resampler_->Process(native_, &resampled_);
  // Each segment's audio is complete in itself: the filter's tail belongs to it.
  resampler_->Flush(&resampled_);
  core_.metrics_.audio_seconds_total.Increment(static_cast<double>(resampled_.size()) / rate_);

  const int32_t index = next_segment_++;
  const size_t per_chunk = std::max<size_t>(
      2, static_cast<size_t>(rate_ * absl::ToInt64Milliseconds(core_.options().chunk) / 1000));
  size_t pos = 0;
  do {
    const size_t n = std::min(per_chunk, resampled_.size() - pos);
    const bool first_chunk = pos == 0;
    AudioChunk chunk;
    chunk.pcm_s16le = audio::PcmToBytes(std::span<const int16_t>(resampled_).subspan(pos, n));
    chunk.sample_rate_hz = rate_;
    chunk.segment_index = index;
    pos += n;
    chunk.end_of_segment = pos >= resampled_.size();
    if (first_chunk) {
      const absl::Duration latency = core_.clock_.Now() - ready;
      chunk.text = segment;
      chunk.segment_latency_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(latency));
      if (index == 0) core_.metrics_.first_chunk_seconds.Observe(absl::ToDoubleSeconds(latency));
    }
    if (!sink(std::move(chunk))) return absl::CancelledError("the client went away");
  } while (pos < resampled_.size());
  return absl::OkStatus();
}

}  // namespace moe::tts
