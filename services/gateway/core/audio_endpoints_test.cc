// /v1/audio/transcriptions and /v1/audio/speech over the fake speech services.
#include "services/gateway/core/audio_endpoints.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/audio/pcm.h"
#include "common/audio/wav.h"
#include "common/metrics/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/testing/fake_voice.h"
#include "services/gateway/testing/recording_writer.h"
#include "services/gateway/testing/tone_wav.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using testing::FakeAsrClient;
using testing::FakeTtsClient;
using ::testing::HasSubstr;
using testing::RecordingWriter;
using testing::ToneWav;

constexpr char kBoundary[] = "XyZbOuNdArY";

// A multipart/form-data upload of `file` and the given text fields.
HttpRequest Upload(const std::string& file,
                   std::vector<std::pair<std::string, std::string>> fields) {
  std::string body;
  for (const auto& [k, v] : fields) {
    body += std::string("--") + kBoundary + "\r\nContent-Disposition: form-data; name=\"" + k +
            "\"\r\n\r\n" + v + "\r\n";
  }
  body += std::string("--") + kBoundary +
          "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n"
          "Content-Type: audio/wav\r\n\r\n" +
          file + "\r\n--" + kBoundary + "--\r\n";
  HttpRequest r;
  r.method = "POST";
  r.target = "/v1/audio/transcriptions";
  r.body = std::move(body);
  r.headers = {{"content-type", std::string("multipart/form-data; boundary=") + kBoundary}};
  return r;
}

HttpRequest Speech(const Json& body) {
  HttpRequest r;
  r.method = "POST";
  r.target = "/v1/audio/speech";
  r.body = body.dump();
  r.headers = {{"content-type", "application/json"}};
  return r;
}

class AudioEndpointsTest : public ::testing::Test {
 protected:
  // Runs a handler to its answer; counts on_done calls.
  std::shared_ptr<RecordingWriter> Transcribe(const HttpRequest& r) {
    auto w = std::make_shared<RecordingWriter>();
    endpoints_.Transcribe(r, w, [this] { ++done_; });
    w->Wait();
    return w;
  }
  std::shared_ptr<RecordingWriter> Speak(const Json& body) {
    auto w = std::make_shared<RecordingWriter>();
    endpoints_.Speak(Speech(body), w, [this] { ++done_; });
    w->Wait();
    return w;
  }
  static Json Error(RecordingWriter& w) { return Json::parse(w.body())["error"]; }

  VoiceOptions options_;
  FakeAsrClient asr_;
  FakeTtsClient tts_;
  common::metrics::Registry registry_;
  VoiceMetrics metrics_{registry_};
  AudioEndpoints endpoints_{options_, 1, asr_, tts_, metrics_};
  int done_ = 0;
};

TEST_F(AudioEndpointsTest, TranscriptionResamplesTheUploadTo16kHzAndAnswersJson) {
  auto w = Transcribe(Upload(ToneWav(8000, 1.0), {{"model", "whisper-1"}, {"prompt", "ignored"}}));
  EXPECT_EQ(w->status(), 200) << w->body();
  EXPECT_EQ(Json::parse(w->body())["text"], "hello world");
  ASSERT_EQ(asr_.num_calls(), 1);
  EXPECT_EQ(asr_.call(0).config.sample_rate_hz, 16000);
  // 1 s of 8 kHz audio is 1 s at 16 kHz: 32000 bytes (the resampler's edges aside).
  EXPECT_NEAR(static_cast<double>(asr_.audio_bytes(0)), 32000, 200);
  EXPECT_TRUE(asr_.call(0).closed);
  EXPECT_EQ(done_, 1);
  EXPECT_EQ(registry_.Value("moe_voice_transcriptions_total").value_or(-1), 1);
}

// The request's slot (on_done) is released when the answer's bytes have left for the client, not
// when the answer is complete: a client that does not read keeps counting against capacity.
TEST_F(AudioEndpointsTest, BothEndpointsReleaseTheirSlotOnlyWhenTheBytesAreFlushed) {
  auto t = std::make_shared<RecordingWriter>();
  t->HoldFlush();
  endpoints_.Transcribe(Upload(ToneWav(16000, 0.5), {{"model", "whisper-1"}}), t,
                        [this] { ++done_; });
  t->Wait();
  EXPECT_EQ(t->status(), 200) << t->body();
  EXPECT_EQ(done_, 0);
  EXPECT_TRUE(t->Flush());
  EXPECT_EQ(done_, 1);

  auto s = std::make_shared<RecordingWriter>();
  s->HoldFlush();
  endpoints_.Speak(Speech({{"model", "tts-1"}, {"voice", "alloy"}, {"input", "Hello there."}}), s,
                   [this] { ++done_; });
  s->Wait();
  EXPECT_EQ(s->status(), 200) << s->body();
  EXPECT_FALSE(s->body().empty());
  EXPECT_EQ(done_, 1);
  EXPECT_TRUE(s->Flush());
  EXPECT_EQ(done_, 2);
}

TEST_F(AudioEndpointsTest, TranscriptionFormatsTextAndVerboseJsonSegments) {
  asr_.final_texts = {"one two", "three"};
  auto text = Transcribe(
      Upload(ToneWav(16000, 2.5), {{"model", "pocketsphinx"}, {"response_format", "text"}}));
  EXPECT_EQ(text->status(), 200);
  EXPECT_EQ(text->body(), "one two three\n");
  auto verbose = Transcribe(Upload(
      ToneWav(16000, 2.5), {{"model", "gpt-4o-transcribe"}, {"response_format", "verbose_json"}}));
  const Json j = Json::parse(verbose->body());
  EXPECT_EQ(j["text"], "one two three");
  EXPECT_DOUBLE_EQ(j["duration"].get<double>(), 2.5);
  ASSERT_EQ(j["segments"].size(), 2u);
  EXPECT_EQ(j["segments"][1]["text"], "three");
  EXPECT_DOUBLE_EQ(j["segments"][1]["start"].get<double>(), 1.0);
}

TEST_F(AudioEndpointsTest, BadUploadsAreA400NamingTheParameterAndNeverReachAsr) {
  const std::string wav = ToneWav(16000, 0.5);
  struct Case {
    HttpRequest request;
    std::string param;
    std::string says;
  };
  HttpRequest not_multipart = Upload(wav, {{"model", "whisper-1"}});
  not_multipart.headers = {{"content-type", "application/json"}};
  const std::vector<Case> cases = {
      {not_multipart, "", "multipart/form-data"},
      {Upload(wav, {}), "model", "required"},
      {Upload(wav, {{"model", "whisper-9"}}), "model", "whisper-9"},
      {Upload(wav, {{"model", "whisper-1"}, {"response_format", "srt"}}), "response_format", "srt"},
      {Upload(wav.substr(0, 30), {{"model", "whisper-1"}}), "file", "audio file"},
      {Upload("garbage bytes, not a RIFF file", {{"model", "whisper-1"}}), "file", "audio file"},
  };
  for (const Case& c : cases) {
    auto w = Transcribe(c.request);
    EXPECT_EQ(w->status(), 400) << c.says;
    const Json e = Error(*w);
    EXPECT_EQ(e["type"], "invalid_request_error");
    if (!c.param.empty()) {
      EXPECT_EQ(e["param"], c.param) << e.dump();
    }
    EXPECT_THAT(e["message"].get<std::string>(), HasSubstr(c.says));
  }
  EXPECT_EQ(asr_.num_calls(), 0);
  EXPECT_EQ(done_, static_cast<int>(cases.size()));
}

TEST_F(AudioEndpointsTest, AudioLongerThanTheLimitIsRefused) {
  options_.max_transcription_audio = absl::Seconds(1);
  AudioEndpoints short_limit(options_, 1, asr_, tts_, metrics_);
  auto w = std::make_shared<RecordingWriter>();
  short_limit.Transcribe(Upload(ToneWav(16000, 2.0), {{"model", "whisper-1"}}), w, [] {});
  w->Wait();
  EXPECT_EQ(w->status(), 400);
  EXPECT_THAT(Error(*w)["message"].get<std::string>(),
              HasSubstr("(limit: voice.max_transcription_audio = 1s)"));
  EXPECT_EQ(Error(*w)["code"], "limit_exceeded");
  EXPECT_EQ(asr_.num_calls(), 0);
}

TEST_F(AudioEndpointsTest, AsrErrorsBecomeOpenAiErrors) {
  asr_.end_status = absl::UnavailableError("asr is restarting");
  auto w = Transcribe(Upload(ToneWav(16000, 0.5), {{"model", "whisper-1"}}));
  EXPECT_EQ(w->status(), 503);
  EXPECT_FALSE(w->header("Retry-After").empty());
}

TEST_F(AudioEndpointsTest, SpeechStreamsMp3ByDefault) {
  auto w = Speak({{"model", "tts-1"}, {"voice", "alloy"}, {"input", "Hello there."}});
  EXPECT_EQ(w->status(), 200);
  EXPECT_TRUE(w->streamed());
  const std::string mp3 = w->body();
  ASSERT_GT(mp3.size(), 100u);
  // An MPEG audio frame sync.
  EXPECT_EQ(static_cast<uint8_t>(mp3[0]), 0xff);
  EXPECT_EQ(static_cast<uint8_t>(mp3[1]) & 0xe0, 0xe0);
  ASSERT_EQ(tts_.num_calls(), 1);
  EXPECT_EQ(tts_.call(0).config.sample_rate_hz, 24000);
  EXPECT_EQ(tts_.call(0).config.voice, "alloy");
  EXPECT_TRUE(tts_.call(0).closed);
  EXPECT_EQ(done_, 1);
}

TEST_F(AudioEndpointsTest, SpeechAsPcmIsTheServiceSamplesAndWavHasAHeader) {
  const std::string input = "Hi.";
  auto pcm = Speak({{"model", "gpt-4o-mini-tts"},
                    {"voice", "nova"},
                    {"input", input},
                    {"response_format", "pcm"},
                    {"speed", 2.0}});
  EXPECT_EQ(pcm->status(), 200);
  // The fake speaks 10 ms (480 samples of 24 kHz) per input byte.
  EXPECT_EQ(pcm->body().size(), input.size() * 480);
  EXPECT_FLOAT_EQ(tts_.call(0).config.speed, 2.0f);
  auto wav =
      Speak({{"model", "tts-1"}, {"voice", "nova"}, {"input", input}, {"response_format", "wav"}});
  EXPECT_EQ(wav->body().substr(0, 4), "RIFF");
  EXPECT_EQ(wav->body().size(), 44 + input.size() * 480);
}

TEST_F(AudioEndpointsTest, UnsupportedSpeechRequestsAreA400) {
  struct Case {
    Json body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"model", "tts-1"}, {"voice", "alloy"}, {"input", "x"}, {"response_format", "aac"}},
       "response_format"},
      {{{"model", "tts-1"}, {"voice", "alloy"}, {"input", "x"}, {"speed", 9}}, "speed"},
      {{{"model", "tts-9"}, {"voice", "alloy"}, {"input", "x"}}, "model"},
      {{{"model", "tts-1"}, {"voice", "alloy"}, {"input", ""}}, "input"},
      {{{"model", "tts-1"}, {"voice", "alloy"}, {"input", std::string(5000, 'a')}}, "input"},
  };
  for (const Case& c : cases) {
    auto w = Speak(c.body);
    EXPECT_EQ(w->status(), 400) << c.body.dump();
    EXPECT_EQ(Error(*w)["param"], c.param) << w->body();
  }
  EXPECT_EQ(tts_.num_calls(), 0);
}

}  // namespace
}  // namespace moe::gateway
