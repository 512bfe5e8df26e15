#include "services/gateway/core/audio_endpoints.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/audio/encoder.h"
#include "common/audio/pcm.h"
#include "common/audio/resampler.h"
#include "common/audio/wav.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/api_error.h"
#include "services/gateway/core/multipart.h"
#include "services/gateway/core/openai_response.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;

constexpr int32_t kAsrRate = 16000;     // what the transcription path sends asr
constexpr int32_t kSpeechRate = 24000;  // OpenAI's speech output rate (pcm is 24 kHz s16le)

bool Listed(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

HttpResponse JsonAnswer(const Json& j) {
  HttpResponse r;
  r.body = DumpJson(j);
  return r;
}

// One transcription: the upload's audio streamed to asr, the finals collected.
class TranscriptionCall final : public AsrObserver,
                                public std::enable_shared_from_this<TranscriptionCall> {
 public:
  struct Segment {
    std::string text;
    double start_s = 0, end_s = 0;
  };
  TranscriptionCall(std::shared_ptr<ResponseWriter> writer, std::string format, double duration_s,
                    int retry_after_s, VoiceMetrics& metrics, std::function<void()> on_done)
      : writer_(std::move(writer)),
        format_(std::move(format)),
        duration_s_(duration_s),
        retry_after_s_(retry_after_s),
        metrics_(metrics),
        on_done_(std::move(on_done)) {}

  void Start(AsrClient& asr, const AsrStreamConfig& config, std::vector<int16_t> pcm) {
    std::unique_ptr<AsrCall> call = asr.Transcribe(config, shared_from_this());
    // 1 s per message: few messages, each far below the gRPC limit.
    for (size_t i = 0; i < pcm.size(); i += kAsrRate) {
      const size_t n = std::min<size_t>(kAsrRate, pcm.size() - i);
      call->SendAudio(audio::PcmToBytes(std::span<const int16_t>(pcm).subspan(i, n)));
    }
    call->CloseSend();
    absl::MutexLock lock(&mu_);
    if (!done_) call_ = std::move(call);
  }
  void Cancel() {
    absl::MutexLock lock(&mu_);
    if (call_ != nullptr) call_->Cancel();
  }

  // AsrObserver
  void OnEvent(AsrEvent e) override {
    if (e.type != AsrEvent::Type::kFinal || e.text.empty()) return;
    absl::MutexLock lock(&mu_);
    segments_.push_back({std::move(e.text), e.start_ms / 1000.0, e.end_ms / 1000.0});
  }
  void OnDone(absl::Status status) override {
    std::vector<Segment> segments;
    std::function<void()> on_done;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      segments = std::move(segments_);
      on_done = std::move(on_done_);
      call_.reset();
    }
    if (!status.ok()) {
      ApiError e = ApiError::FromStatus(status, retry_after_s_);
      if (status.code() == absl::StatusCode::kInvalidArgument) e.param = "file";
      if (status.code() == absl::StatusCode::kInvalidArgument &&
          absl::StrContains(status.message(), "language")) {
        e.param = "language";
      }
      writer_->Send(e.ToResponse());
    } else {
      metrics_.transcriptions_total.Increment();
      std::vector<std::string> texts;
      for (const Segment& s : segments) texts.push_back(s.text);
      const std::string text = absl::StrJoin(texts, " ");
      if (format_ == "text") {
        HttpResponse r;
        r.content_type = "text/plain; charset=utf-8";
        r.body = text + "\n";
        writer_->Send(std::move(r));
      } else if (format_ == "verbose_json") {
        Json segs = Json::array();
        for (size_t i = 0; i < segments.size(); ++i) {
          segs.push_back({{"id", i},
                          {"seek", 0},
                          {"start", segments[i].start_s},
                          {"end", segments[i].end_s},
                          {"text", segments[i].text},
                          {"tokens", Json::array()},
                          {"temperature", 0.0},
                          {"avg_logprob", 0.0},
                          {"compression_ratio", 0.0},
                          {"no_speech_prob", 0.0}});
        }
        writer_->Send(JsonAnswer({{"task", "transcribe"},
                                  {"language", "english"},
                                  {"duration", duration_s_},
                                  {"text", text},
                                  {"segments", std::move(segs)}}));
      } else {
        writer_->Send(JsonAnswer(
            {{"text", text},
             {"usage",
              {{"type", "duration"}, {"seconds", static_cast<int64_t>(std::ceil(duration_s_))}}}}));
      }
    }
    // The slot is held until the client has the bytes (or is cut), as for completions.
    if (on_done) writer_->WhenFlushed(std::move(on_done));
  }

 private:
  const std::shared_ptr<ResponseWriter> writer_;
  const std::string format_;
  const double duration_s_;
  const int retry_after_s_;
  VoiceMetrics& metrics_;

  absl::Mutex mu_;
  std::function<void()> on_done_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<AsrCall> call_ ABSL_GUARDED_BY(mu_);
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// One speech request: the input to tts, the audio encoded and streamed as it comes.
class SpeechCall final : public TtsObserver, public std::enable_shared_from_this<SpeechCall> {
 public:
  SpeechCall(std::shared_ptr<ResponseWriter> writer, audio::AudioFormat format, bool sse,
             std::unique_ptr<audio::AudioEncoder> encoder, int64_t input_chars, int retry_after_s,
             std::function<void()> on_done)
      : writer_(std::move(writer)),
        format_(format),
        sse_(sse),
        encoder_(std::move(encoder)),
        input_chars_(input_chars),
        retry_after_s_(retry_after_s),
        on_done_(std::move(on_done)) {}

  void Start(TtsClient& tts, const TtsStreamConfig& config, std::string input) {
    std::unique_ptr<TtsCall> call = tts.Synthesize(config, shared_from_this());
    call->SendText(std::move(input));
    call->CloseSend();
    absl::MutexLock lock(&mu_);
    if (!done_) call_ = std::move(call);
  }
  void Cancel() {
    absl::MutexLock lock(&mu_);
    if (call_ != nullptr) call_->Cancel();
  }

  // TtsObserver (serialised callbacks)
  void OnAudio(TtsAudio a) override {
    if (a.pcm_s16le.empty()) return;
    EnsureStarted();
    std::string bytes;
    if (!encoder_->Encode(audio::PcmFromBytes(a.pcm_s16le), &bytes).ok()) return;
    samples_ += static_cast<int64_t>(a.pcm_s16le.size() / 2);
    Emit(std::move(bytes));
  }
  void OnDone(absl::Status status) override {
    std::function<void()> on_done;
    {
      absl::MutexLock lock(&mu_);
      done_ = true;
      on_done = std::move(on_done_);
      call_.reset();
    }
    if (!status.ok() && !started_) {
      ApiError e = ApiError::FromStatus(status, retry_after_s_);
      if (status.code() == absl::StatusCode::kInvalidArgument) {
        e.param = absl::StrContains(status.message(), "voice") ? "voice" : "input";
      }
      writer_->Send(e.ToResponse());
    } else {
      // A failure after the first bytes can only end the stream early.
      EnsureStarted();
      std::string rest;
      if (status.ok()) encoder_->Finish(&rest).IgnoreError();
      Emit(std::move(rest));
      if (sse_) {
        const Json done = {{"type", "speech.audio.done"},
                           {"usage",
                            {{"input_tokens", input_chars_},
                             {"output_tokens", samples_ / 240},  // 10 ms frames
                             {"total_tokens", input_chars_ + samples_ / 240}}}};
        writer_->Write(absl::StrCat("data: ", DumpJson(done), "\n\n"));
      }
      writer_->End();
    }
    // The slot is held until the client has the bytes (or is cut), as for completions.
    if (on_done) writer_->WhenFlushed(std::move(on_done));
  }

 private:
  void EnsureStarted() {
    if (started_) return;
    started_ = true;
    writer_->StartStream(200,
                         {{"Content-Type", sse_ ? std::string("text/event-stream; charset=utf-8")
                                                : std::string(audio::ContentType(format_))}});
  }
  void Emit(std::string bytes) {
    if (bytes.empty()) return;
    if (!sse_) {
      writer_->Write(std::move(bytes));
      return;
    }
    const Json delta = {{"type", "speech.audio.delta"}, {"audio", absl::Base64Escape(bytes)}};
    writer_->Write(absl::StrCat("data: ", DumpJson(delta), "\n\n"));
  }

  const std::shared_ptr<ResponseWriter> writer_;
  const audio::AudioFormat format_;
  const bool sse_;
  const std::unique_ptr<audio::AudioEncoder> encoder_;
  const int64_t input_chars_;
  const int retry_after_s_;
  bool started_ = false;  // observer callbacks only
  int64_t samples_ = 0;   // observer callbacks only

  absl::Mutex mu_;
  std::function<void()> on_done_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<TtsCall> call_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

AudioEndpoints::AudioEndpoints(const VoiceOptions& options, int retry_after_s, AsrClient& asr,
                               TtsClient& tts, VoiceMetrics& metrics)
    : options_(options), retry_after_s_(retry_after_s), asr_(asr), tts_(tts), metrics_(metrics) {}

CancelFn AudioEndpoints::Transcribe(const HttpRequest& request,
                                    const std::shared_ptr<ResponseWriter>& writer,
                                    std::function<void()> on_done) {
  auto reject = [&](const ApiError& e) {
    writer->Send(e.ToResponse());
    on_done();
    return CancelFn();
  };
  if (!asr_.configured()) {
    return reject(ApiError::Overloaded(
        "Speech recognition is not configured on this gateway (voice.asr).", retry_after_s_));
  }
  absl::StatusOr<std::vector<FormPart>> parts =
      ParseMultipartFormData(request.body, request.Header("content-type"));
  if (!parts.ok()) return reject(ApiError::InvalidRequest(std::string(parts.status().message())));
  const FormPart* file = nullptr;
  std::string model, format = "json", language, stream;
  for (const FormPart& p : *parts) {
    if (p.name == "file") file = &p;
    if (p.name == "model") model = std::string(p.data);
    if (p.name == "response_format") format = std::string(p.data);
    if (p.name == "language") language = std::string(p.data);
    if (p.name == "stream") stream = absl::AsciiStrToLower(std::string(p.data));
    // prompt, temperature, timestamp_granularities[], chunking_strategy, include[]: accepted,
    // not used by this engine.
  }
  if (file == nullptr) return reject(ApiError::InvalidParam("file", "'file' is required."));
  if (model.empty()) return reject(ApiError::InvalidParam("model", "'model' is required."));
  if (model != "pocketsphinx" && !Listed(options_.transcription_models, model)) {
    return reject(ApiError::InvalidParam(
        "model", absl::StrCat("Model '", model, "' is not served here: use pocketsphinx or ",
                              absl::StrJoin(options_.transcription_models, ", "), ".")));
  }
  if (format != "json" && format != "text" && format != "verbose_json") {
    return reject(ApiError::InvalidParam(
        "response_format",
        absl::StrCat("response_format '", format,
                     "' is not supported here: use json, text or verbose_json.")));
  }
  if (stream == "true") {
    return reject(ApiError::InvalidParam("stream", "Streamed transcription is not supported."));
  }
  const int64_t max_frames_at_48k = absl::ToInt64Seconds(options_.max_transcription_audio) * 48000;
  absl::StatusOr<audio::DecodedAudio> decoded =
      audio::DecodeWav(file->data, {.max_frames = std::max<int64_t>(max_frames_at_48k, 1)});
  if (!decoded.ok()) {
    return reject(ApiError::InvalidParam(
        "file", absl::StrCat("Unsupported or invalid audio file (WAV with PCM or float samples "
                             "is accepted): ",
                             decoded.status().message())));
  }
  const double duration_s =
      static_cast<double>(decoded->samples.size()) / static_cast<double>(decoded->sample_rate);
  if (duration_s > absl::ToDoubleSeconds(options_.max_transcription_audio)) {
    return reject(
        ApiError::LimitExceeded("file", "voice.max_transcription_audio",
                                absl::FormatDuration(options_.max_transcription_audio),
                                absl::StrFormat("The audio is %.1f s long.", duration_s)));
  }
  absl::StatusOr<std::vector<int16_t>> pcm =
      audio::Resample(decoded->samples, decoded->sample_rate, kAsrRate);
  if (!pcm.ok()) return reject(ApiError::InvalidParam("file", std::string(pcm.status().message())));
  decoded->samples = {};
  auto call = std::make_shared<TranscriptionCall>(writer, format, duration_s, retry_after_s_,
                                                  metrics_, std::move(on_done));
  // language: asr checks it (English tags only) and answers INVALID_ARGUMENT otherwise.
  call->Start(asr_, {.sample_rate_hz = kAsrRate, .partial_results = false, .language = language},
              *std::move(pcm));
  return [weak = std::weak_ptr<TranscriptionCall>(call)] {
    if (auto c = weak.lock()) c->Cancel();
  };
}

CancelFn AudioEndpoints::Speak(const HttpRequest& request,
                               const std::shared_ptr<ResponseWriter>& writer,
                               std::function<void()> on_done) {
  auto reject = [&](const ApiError& e) {
    writer->Send(e.ToResponse());
    on_done();
    return CancelFn();
  };
  if (!tts_.configured()) {
    return reject(ApiError::Overloaded(
        "Speech synthesis is not configured on this gateway (voice.tts).", retry_after_s_));
  }
  const Json body = Json::parse(request.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return reject(ApiError::InvalidRequest("The request body is not a JSON object."));
  }
  auto str = [&](const char* key, std::string* out) -> std::optional<ApiError> {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) return std::nullopt;
    if (!it->is_string())
      return ApiError::InvalidParam(key, absl::StrCat("'", key, "' must be a string."));
    *out = it->get<std::string>();
    return std::nullopt;
  };
  std::string model, input, voice, format = "mp3", stream_format = "audio", instructions;
  for (auto [key, out] : {std::pair{"model", &model},
                          {"input", &input},
                          {"voice", &voice},
                          {"response_format", &format},
                          {"stream_format", &stream_format},
                          {"instructions", &instructions}}) {
    if (std::optional<ApiError> e = str(key, out)) return reject(*e);
  }
  if (model.empty()) return reject(ApiError::InvalidParam("model", "'model' is required."));
  if (model != "espeak-ng" && !Listed(options_.speech_models, model)) {
    return reject(ApiError::InvalidParam(
        "model", absl::StrCat("Model '", model, "' is not served here: use espeak-ng or ",
                              absl::StrJoin(options_.speech_models, ", "), ".")));
  }
  if (input.empty()) return reject(ApiError::InvalidParam("input", "'input' is required."));
  if (static_cast<int64_t>(input.size()) > options_.max_speech_input_chars) {
    return reject(ApiError::LimitExceeded(
        "input", "voice.max_speech_input_chars", options_.max_speech_input_chars,
        absl::StrCat("'input' is ", input.size(), " bytes long.")));
  }
  const std::optional<audio::AudioFormat> f = audio::ParseAudioFormat(format);
  if (!f) {
    return reject(ApiError::InvalidParam(
        "response_format", absl::StrCat("response_format '", format,
                                        "' is not supported here: use mp3, opus, flac, wav or "
                                        "pcm.")));
  }
  if (stream_format != "audio" && stream_format != "sse") {
    return reject(ApiError::InvalidParam("stream_format", "stream_format must be audio or sse."));
  }
  double speed = 1.0;
  if (auto it = body.find("speed"); it != body.end() && !it->is_null()) {
    if (!it->is_number())
      return reject(ApiError::InvalidParam("speed", "'speed' must be a number."));
    speed = it->get<double>();
    if (!(speed >= 0.25 && speed <= 4.0)) {
      return reject(ApiError::InvalidParam("speed", "'speed' must be in [0.25, 4.0]."));
    }
  }
  absl::StatusOr<std::unique_ptr<audio::AudioEncoder>> encoder =
      audio::CreateAudioEncoder(*f, kSpeechRate);
  if (!encoder.ok()) return reject(ApiError::Internal(std::string(encoder.status().message())));
  metrics_.speech_total.Add({{"format", format}}).Increment();
  auto call = std::make_shared<SpeechCall>(writer, *f, stream_format == "sse", *std::move(encoder),
                                           static_cast<int64_t>(input.size()), retry_after_s_,
                                           std::move(on_done));
  call->Start(tts_,
              {.voice = voice.empty() ? options_.realtime.voice : voice,
               .sample_rate_hz = kSpeechRate,
               .speed = static_cast<float>(speed)},
              std::move(input));
  return [weak = std::weak_ptr<SpeechCall>(call)] {
    if (auto c = weak.lock()) c->Cancel();
  };
}

}  // namespace moe::gateway
