#include "services/asr/core/asr_core.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/audio/pcm.h"

namespace moe::asr {
namespace {

// Whether a JSGF text has an `import <...>;` statement (pocketsphinx resolves one to a .gram file
// on the disk, a path chosen by the caller). Statements end with ';'; comments before one are
// skipped.
bool HasJsgfImport(std::string_view jsgf) {
  size_t i = 0;
  bool statement_start = true;
  while (i < jsgf.size()) {
    const char ch = jsgf[i];
    if (jsgf.compare(i, 2, "//") == 0) {
      i = jsgf.find('\n', i);
      if (i == std::string_view::npos) break;
      continue;
    }
    if (jsgf.compare(i, 2, "/*") == 0) {
      i = jsgf.find("*/", i + 2);
      if (i == std::string_view::npos) break;
      i += 2;
      continue;
    }
    if (absl::ascii_isspace(static_cast<unsigned char>(ch))) {
      ++i;
      continue;
    }
    if (statement_start && jsgf.compare(i, 6, "import") == 0 &&
        (i + 6 == jsgf.size() || jsgf[i + 6] == '<' ||
         absl::ascii_isspace(static_cast<unsigned char>(jsgf[i + 6])))) {
      return true;
    }
    statement_start = ch == ';';
    ++i;
  }
  return false;
}

// The decoder is fed and its VAD read in frames of this length: the endpointer's resolution.
constexpr int kFrameMs = 20;

}  // namespace

absl::Status ValidateStreamConfig(const StreamConfig& c, const AsrCoreOptions& o) {
  if (c.sample_rate_hz < 8000 || c.sample_rate_hz > 48000) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample_rate_hz: ", c.sample_rate_hz, " is not in [8000, 48000]"));
  }
  if (c.endpoint_silence_ms != 0 && (c.endpoint_silence_ms < 100 || c.endpoint_silence_ms > 5000)) {
    return absl::InvalidArgumentError(
        absl::StrCat("endpoint_silence_ms: ", c.endpoint_silence_ms, " is not in [100, 5000]"));
  }
  const std::string lang = absl::AsciiStrToLower(c.language);
  if (!lang.empty() && lang != "en" && !absl::StartsWith(lang, "en-") &&
      !absl::StartsWith(lang, "en_")) {
    return absl::InvalidArgumentError(
        absl::StrCat("language: '", c.language, "' is not served (English only: en, en-US)"));
  }
  switch (c.spec.mode) {
    case RecognitionMode::kDictation:
      break;
    case RecognitionMode::kGrammar:
      if (c.spec.grammar_jsgf.empty() ||
          static_cast<int64_t>(c.spec.grammar_jsgf.size()) > o.max_grammar_bytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "grammar_jsgf: must be 1..", o.max_grammar_bytes, " bytes in grammar mode"));
      }
      if (HasJsgfImport(c.spec.grammar_jsgf)) {
        return absl::InvalidArgumentError(
            "grammar_jsgf: import statements are not supported (pocketsphinx would read grammar "
            "files from the disk)");
      }
      break;
    case RecognitionMode::kKeywords:
      if (c.spec.keywords.empty() || static_cast<int>(c.spec.keywords.size()) > o.max_keywords) {
        return absl::InvalidArgumentError(
            absl::StrCat("keywords: 1..", o.max_keywords, " are needed in keyword mode"));
      }
      for (const std::string& k : c.spec.keywords) {
        if (k.empty() || k.size() > 128 || k.find_first_of("\n\r/") != std::string::npos) {
          return absl::InvalidArgumentError(
              absl::StrCat("keywords: '", k, "' must be 1..128 bytes of words"));
        }
      }
      break;
  }
  return absl::OkStatus();
}

AsrCore::AsrCore(const AsrCoreOptions& options, std::unique_ptr<DecoderPool> pool,
                 common::Clock& clock, common::metrics::Registry& registry)
    : options_(options), pool_(std::move(pool)), clock_(clock), metrics_(registry) {}

AsrCore::~AsrCore() = default;

absl::StatusOr<std::unique_ptr<AsrStream>> AsrCore::Open(const StreamConfig& config) {
  if (absl::Status s = ValidateStreamConfig(config, options_); !s.ok()) {
    metrics_.rejected_total.Add({{"reason", "invalid"}}).Increment();
    return s;
  }
  absl::StatusOr<DecoderLease> decoder = pool_->Acquire();
  if (!decoder.ok()) {
    metrics_.rejected_total.Add({{"reason", "busy"}}).Increment();
    return decoder.status();
  }
  if (absl::Status s = (*decoder)->Configure(config.spec); !s.ok()) {
    metrics_.rejected_total.Add({{"reason", "invalid"}}).Increment();
    return s;
  }
  if (absl::Status s = (*decoder)->StartUtterance(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<audio::Resampler>> resampler =
      audio::Resampler::Create(config.sample_rate_hz, (*decoder)->sample_rate());
  if (!resampler.ok()) return resampler.status();
  metrics_.streams_total.Increment();
  metrics_.streams_active.Increment();
  return std::unique_ptr<AsrStream>(
      new AsrStream(*this, config, *std::move(decoder), *std::move(resampler)));
}

void AsrCore::RecordDecoding(absl::Duration decoding, double audio_seconds) {
  metrics_.stage_asr_seconds.Observe(absl::ToDoubleSeconds(decoding));
  metrics_.audio_seconds_total.Increment(audio_seconds);
  const absl::Time now = clock_.Now();
  absl::MutexLock lock(&mu_);
  window_.push_back({now, absl::ToDoubleSeconds(decoding), audio_seconds});
  window_decoding_s_ += absl::ToDoubleSeconds(decoding);
  window_audio_s_ += audio_seconds;
  while (!window_.empty() && window_.front().at < now - options_.realtime_factor_window) {
    window_decoding_s_ -= window_.front().decoding_s;
    window_audio_s_ -= window_.front().audio_s;
    window_.pop_front();
  }
  metrics_.realtime_factor.Set(window_audio_s_ > 1e-9 ? window_decoding_s_ / window_audio_s_ : 0);
}

AsrStream::AsrStream(AsrCore& core, const StreamConfig& config, DecoderLease decoder,
                     std::unique_ptr<audio::Resampler> resampler)
    : core_(core),
      config_(config),
      decoder_(std::move(decoder)),
      resampler_(std::move(resampler)),
      max_samples_(absl::ToInt64Milliseconds(core.options().max_stream_audio) *
                   decoder_->sample_rate() / 1000),
      endpointer_({
          .silence_ms = config.endpoint_silence_ms > 0
                            ? config.endpoint_silence_ms
                            : static_cast<int32_t>(
                                  absl::ToInt64Milliseconds(core.options().endpoint_silence)),
          .onset_ms = decoder_->vad_timing().onset_ms,
          .hangover_ms = decoder_->vad_timing().hangover_ms,
          .max_utterance_ms =
              static_cast<int32_t>(absl::ToInt64Milliseconds(core.options().max_utterance)),
          .manual = config.manual_endpointing,
      }),
      stability_(static_cast<int32_t>(absl::ToInt64Milliseconds(core.options().stability_window))) {
}

AsrStream::~AsrStream() { core_.metrics_.streams_active.Decrement(); }

absl::Status AsrStream::Audio(std::string_view pcm, std::vector<AsrEvent>* events) {
  if (failed_) return absl::FailedPreconditionError("the stream failed earlier");
  if (pcm.size() % 2 != 0) {
    failed_ = true;
    core_.metrics_.rejected_total.Add({{"reason", "invalid"}}).Increment();
    return absl::InvalidArgumentError(
        absl::StrCat("audio: ", pcm.size(), " bytes is not a whole number of s16 samples"));
  }
  if (static_cast<int64_t>(pcm.size()) > core_.options().max_chunk_bytes) {
    failed_ = true;
    core_.metrics_.rejected_total.Add({{"reason", "invalid"}}).Increment();
    return absl::InvalidArgumentError(absl::StrCat("audio: a chunk of ", pcm.size(),
                                                   " bytes is over the limit of ",
                                                   core_.options().max_chunk_bytes));
  }
  const std::vector<int16_t> in = audio::PcmFromBytes(pcm);
  resampled_.clear();
  resampler_->Process(in, &resampled_);
  return Feed(resampled_, events);
}

absl::Status AsrStream::Feed(std::span<const int16_t> samples, std::vector<AsrEvent>* events) {
  if (samples_ + static_cast<int64_t>(frame_.size() + samples.size()) > max_samples_) {
    failed_ = true;
    core_.metrics_.rejected_total.Add({{"reason", "too_long"}}).Increment();
    return absl::ResourceExhaustedError(
        absl::StrCat("the stream passed its limit of ",
                     absl::FormatDuration(core_.options().max_stream_audio), " of audio"));
  }
  const int rate = decoder_->sample_rate();
  const size_t frame_samples = static_cast<size_t>(rate * kFrameMs / 1000);
  const absl::Time start = core_.clock_.Now();
  const int64_t fed_before = samples_;
  size_t i = 0;
  while (i < samples.size()) {
    const size_t take = std::min(frame_samples - frame_.size(), samples.size() - i);
    frame_.insert(frame_.end(), samples.begin() + i, samples.begin() + i + take);
    i += take;
    if (frame_.size() < frame_samples) break;
    if (absl::Status s = decoder_->Process(frame_); !s.ok()) {
      failed_ = true;
      return s;
    }
    samples_ += static_cast<int64_t>(frame_.size());
    frame_.clear();
    const int64_t now_ms = samples_ * 1000 / rate;
    switch (endpointer_.Update(now_ms, decoder_->InSpeech())) {
      case Endpointer::Event::kSpeechStarted:
        events->push_back({.type = AsrEvent::Type::kSpeechStarted,
                           .utterance_index = utterance_index_,
                           .start_ms = endpointer_.speech_start_ms()});
        next_partial_ms_ = now_ms + absl::ToInt64Milliseconds(core_.options().partial_interval);
        break;
      case Endpointer::Event::kEndpoint:
        if (absl::Status s = EndUtterance(true, events); !s.ok()) return s;
        break;
      case Endpointer::Event::kNone:
        if (endpointer_.in_utterance() && now_ms >= next_partial_ms_) {
          next_partial_ms_ = now_ms + absl::ToInt64Milliseconds(core_.options().partial_interval);
          MaybePartial(events);
        }
        break;
    }
  }
  const int64_t fed = samples_ - fed_before;
  if (fed > 0) core_.RecordDecoding(core_.clock_.Now() - start, static_cast<double>(fed) / rate);
  return absl::OkStatus();
}

void AsrStream::MaybePartial(std::vector<AsrEvent>* events) {
  if (!config_.partial_results) return;
  std::string text = decoder_->Partial();
  const std::vector<std::string> words = SplitWords(text);
  const int stable = stability_.Observe(audio_ms(), words);
  if (text == last_partial_ && stable == last_stable_words_) return;
  last_partial_ = text;
  last_stable_words_ = stable;
  events->push_back({.type = AsrEvent::Type::kPartial,
                     .text = std::move(text),
                     .utterance_index = utterance_index_,
                     .start_ms = endpointer_.speech_start_ms(),
                     .stable_bytes = PrefixBytes(words, stable)});
}

absl::Status AsrStream::EndUtterance(bool speech_heard, std::vector<AsrEvent>* events) {
  const absl::Time decided = core_.clock_.Now();
  const int64_t start_ms = speech_heard ? endpointer_.speech_start_ms() : audio_ms();
  const int64_t end_ms = speech_heard ? endpointer_.speech_end_ms() : audio_ms();
  if (speech_heard) {
    events->push_back({.type = AsrEvent::Type::kSpeechStopped,
                       .utterance_index = utterance_index_,
                       .start_ms = start_ms,
                       .end_ms = end_ms});
  }
  absl::StatusOr<std::string> text = decoder_->EndUtterance();
  if (!text.ok()) {
    failed_ = true;
    return text.status();
  }
  if (absl::Status s = decoder_->StartUtterance(); !s.ok()) {
    failed_ = true;
    return s;
  }
  const absl::Duration finalize = core_.clock_.Now() - decided;
  core_.metrics_.finalize_seconds.Observe(absl::ToDoubleSeconds(finalize));
  core_.metrics_.utterances_total.Increment();
  const auto bytes = static_cast<uint32_t>(text->size());
  events->push_back({.type = AsrEvent::Type::kFinal,
                     .text = *std::move(text),
                     .utterance_index = utterance_index_,
                     .start_ms = start_ms,
                     .end_ms = end_ms,
                     .stable_bytes = bytes,
                     .finalize_ms = static_cast<uint32_t>(absl::ToInt64Milliseconds(finalize))});
  ++utterance_index_;
  endpointer_.Reset();
  stability_.Reset();
  last_partial_.clear();
  last_stable_words_ = 0;
  return absl::OkStatus();
}

absl::Status AsrStream::Finalize(std::vector<AsrEvent>* events) {
  if (failed_) return absl::FailedPreconditionError("the stream failed earlier");
  return EndUtterance(endpointer_.in_utterance(), events);
}

absl::Status AsrStream::Discard(std::vector<AsrEvent>* events) {
  if (failed_) return absl::FailedPreconditionError("the stream failed earlier");
  absl::StatusOr<std::string> dropped = decoder_->EndUtterance();
  if (!dropped.ok()) return dropped.status();
  endpointer_.Reset();
  stability_.Reset();
  last_partial_.clear();
  last_stable_words_ = 0;
  frame_.clear();
  return decoder_->StartUtterance();
}

absl::Status AsrStream::Finish(std::vector<AsrEvent>* events) {
  if (failed_) return absl::FailedPreconditionError("the stream failed earlier");
  resampled_.clear();
  resampler_->Flush(&resampled_);
  // Pad the last partial frame with silence so that the decoder sees all of the audio.
  if (!frame_.empty() || !resampled_.empty()) {
    const size_t frame_samples = static_cast<size_t>(decoder_->sample_rate() * kFrameMs / 1000);
    const size_t total = frame_.size() + resampled_.size();
    resampled_.resize(resampled_.size() + (frame_samples - total % frame_samples) % frame_samples);
    if (absl::Status s = Feed(resampled_, events); !s.ok()) return s;
  }
  if (endpointer_.in_utterance()) return EndUtterance(true, events);
  return decoder_->EndUtterance().status();
}

}  // namespace moe::asr
