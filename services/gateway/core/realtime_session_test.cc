// /v1/realtime sessions through Gateway::Upgrade, over the fake backend, asr and tts: the test
// plays the asr service (Emit) and reads the events the session sends (FakeWebSocket).
#include "services/gateway/core/realtime_session.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/gateway.h"
#include "services/gateway/testing/fake_backend.h"
#include "services/gateway/testing/fake_voice.h"
#include "services/gateway/testing/manual_timer_queue.h"
#include "services/gateway/testing/test_tokenizer.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using testing::FakeAsrClient;
using testing::FakeBackend;
using testing::FakeBackendOptions;
using testing::FakeTtsClient;
using testing::FakeWebSocket;
using ::testing::HasSubstr;
using testing::ManualTimerQueue;
using ::testing::Not;
using Type = AsrEvent::Type;

const Json kGaSession = {
    {"type", "session.update"},
    {"session",
     {{"type", "realtime"},
      {"output_modalities", Json::array({"audio"})},
      {"max_output_tokens", 6},
      {"audio",
       {{"input",
         {{"format", {{"type", "audio/pcm"}, {"rate", 24000}}},
          {"transcription", {{"model", "whisper-1"}}},
          {"turn_detection", {{"type", "server_vad"}, {"silence_duration_ms", 300}}}}},
        {"output", {{"voice", "alloy"}}}}}}}};

class RealtimeSessionTest : public ::testing::Test {
 protected:
  void Init(FakeBackendOptions backend_options = {}, GatewayOptions options = {}) {
    backend_ = std::make_unique<FakeBackend>(std::move(backend_options));
    options.model_dir = "/unused";
    auto gw = Gateway::Create(options, ModelInfo{"tiny", 1024, 0},
                              GatewayDeps{*tokenizer_, *backend_, clock_, registry_},
                              GatewayVoiceDeps{asr_, tts_, timers_});
    ASSERT_OK(gw.status());
    gateway_ = std::move(gw).value();
  }

  // Opens a session; `beta`: with the OpenAI-Beta: realtime=v1 header.
  std::shared_ptr<WebSocketHandler> Open(bool beta = false) {
    HttpRequest r;
    r.method = "GET";
    r.target = "/v1/realtime?model=gpt-realtime";
    r.client = "10.0.0.1";
    if (beta) r.headers = {{"openai-beta", "realtime=v1"}};
    UpgradeResult u = gateway_->Upgrade(r, ws_);
    EXPECT_NE(u.handler, nullptr) << u.rejection.body;
    EXPECT_TRUE(ws_->WaitFor("session.created").has_value());
    return u.handler;
  }
  // The asr call the session opened (after its first audio).
  FakeAsrClient::Call& Asr() {
    EXPECT_EQ(asr_.num_calls(), 1);
    return asr_.call(0);
  }
  static void Append(WebSocketHandler& s, size_t bytes) {
    s.OnText(Json{{"type", "input_audio_buffer.append"},
                  {"audio", absl::Base64Escape(std::string(bytes, '\x01'))}}
                 .dump());
  }

  // The backend's thread first: it still calls sessions (which use the gateway's metrics) until
  // it is joined (ASan saw a use after free of the gateway when the members went in order).
  void TearDown() override { backend_.reset(); }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_ = testing::MakeTestTokenizer();
  common::testing::FakeClock clock_;
  common::metrics::Registry registry_;
  FakeAsrClient asr_;
  FakeTtsClient tts_;
  ManualTimerQueue timers_;
  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<Gateway> gateway_;
  std::shared_ptr<FakeWebSocket> ws_ = std::make_shared<FakeWebSocket>();
};

TEST_F(RealtimeSessionTest, ASpokenTurnIsTranscribedAnsweredAndSpoken) {
  Init();
  auto s = Open();
  s->OnText(kGaSession.dump());
  ASSERT_TRUE(ws_->WaitFor("session.updated").has_value());
  Append(*s, 4800);
  FakeAsrClient::Call& asr = Asr();
  EXPECT_EQ(asr.config.sample_rate_hz, 24000);
  EXPECT_EQ(asr.config.endpoint_silence_ms, 300u);
  EXPECT_EQ(asr_.audio_bytes(0), 4800);
  asr.Emit({.type = Type::kSpeechStarted, .start_ms = 100});
  asr.Emit({.type = Type::kPartial, .text = "what is the", .stable_bytes = 7});
  asr.Emit({.type = Type::kSpeechStopped, .end_ms = 900});
  asr.Emit({.type = Type::kFinal, .text = "what is the time", .finalize_ms = 20});
  const auto done = ws_->WaitFor("response.done");
  ASSERT_TRUE(done.has_value()) << ws_->Types();
  EXPECT_EQ((*done)["response"]["status"], "completed") << done->dump();

  EXPECT_EQ(ws_->Types("input_audio_buffer"),
            "input_audio_buffer.speech_started input_audio_buffer.speech_stopped "
            "input_audio_buffer.committed");
  const auto delta = ws_->WaitFor("conversation.item.input_audio_transcription.delta");
  EXPECT_EQ((*delta)["delta"], "what is");
  EXPECT_EQ((*ws_->WaitFor("conversation.item.input_audio_transcription.completed"))["transcript"],
            "what is the time");
  // The prompt holds the transcript; the reply's text went to tts and came back as audio.
  EXPECT_THAT(tokenizer_->Decode(backend_->last_request().prompt_token_ids, true),
              HasSubstr("what is the time"));
  ASSERT_EQ(tts_.num_calls(), 1);
  EXPECT_EQ(tts_.call(0).config.voice, "alloy");
  const auto audio = ws_->WaitFor("response.output_audio.delta");
  ASSERT_TRUE(audio.has_value());
  std::string pcm;
  ASSERT_TRUE(absl::Base64Unescape((*audio)["delta"].get<std::string>(), &pcm));
  EXPECT_GT(pcm.size(), 0u);
  EXPECT_EQ(pcm.size() % 2, 0u);
  EXPECT_TRUE(ws_->WaitFor("response.output_audio_transcript.delta").has_value());
  // GA names only: never the beta ones as well (a client handling both would play twice).
  EXPECT_THAT(ws_->Types(), Not(HasSubstr("response.audio.delta")));
  EXPECT_EQ((*done)["response"]["usage"]["output_tokens"], 6);
  EXPECT_TRUE((*done)["response"]["moe_timings"].contains("pipeline_ms")) << done->dump();
}

TEST_F(RealtimeSessionTest, TheBetaHeaderSelectsTheBetaEventNames) {
  Init();
  auto s = Open(/*beta=*/true);
  s->OnText(R"({"type":"session.update","session":{"modalities":["text","audio"],
               "input_audio_transcription":{"model":"whisper-1"},
               "turn_detection":{"type":"server_vad"}}})");
  ASSERT_TRUE(ws_->WaitFor("session.updated").has_value());
  s->OnText(R"({"type":"conversation.item.create","item":{"type":"message","role":"user",
               "content":[{"type":"input_text","text":"hello"}]}})");
  s->OnText(R"({"type":"response.create","response":{"max_output_tokens":4}})");
  ASSERT_TRUE(ws_->WaitFor("response.done").has_value()) << ws_->Types();
  const std::string types = ws_->Types("response.");
  EXPECT_THAT(types, HasSubstr("response.audio.delta"));
  EXPECT_THAT(types, HasSubstr("response.audio_transcript.delta"));
  EXPECT_THAT(types, Not(HasSubstr("response.output_audio.delta")));
  EXPECT_THAT(ws_->Types(), HasSubstr("conversation.item.created"));
}

TEST_F(RealtimeSessionTest, SpeechDuringAReplyCancelsIt) {
  FakeBackendOptions held;
  held.hold_after_tokens = 2;
  Init(held);
  auto s = Open();
  s->OnText(kGaSession.dump());
  s->OnText(R"({"type":"conversation.item.create","item":{"type":"message","role":"user",
               "content":[{"type":"input_text","text":"tell me a story"}]}})");
  s->OnText(R"({"type":"response.create"})");
  ASSERT_TRUE(ws_->WaitFor("response.created").has_value());
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  Append(*s, 960);
  Asr().Emit({.type = Type::kSpeechStarted, .start_ms = 40});
  const auto done = ws_->WaitFor("response.done");
  ASSERT_TRUE(done.has_value()) << ws_->Types();
  EXPECT_EQ((*done)["response"]["status"], "cancelled");
  EXPECT_EQ((*done)["response"]["status_details"]["reason"], "turn_detected");
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_EQ(registry_.Value("moe_voice_barge_ins_total").value_or(-1), 1);
  backend_->Release();
}

TEST_F(RealtimeSessionTest, TheStableTranscriptIsPrefilledWhileTheUserSpeaks) {
  Init();
  auto s = Open();
  s->OnText(kGaSession.dump());
  Append(*s, 960);
  FakeAsrClient::Call& asr = Asr();
  asr.Emit({.type = Type::kSpeechStarted});
  // Below speculative_min_chars (12) of stable text: nothing yet.
  asr.Emit({.type = Type::kPartial, .text = "what is", .stable_bytes = 7});
  EXPECT_EQ(backend_->num_prefills(), 0);
  asr.Emit({.type = Type::kPartial, .text = "what is the time in paris", .stable_bytes = 20});
  ASSERT_TRUE(backend_->WaitForIdle(absl::Seconds(10)));
  EXPECT_EQ(backend_->num_prefills(), 1);
  EXPECT_TRUE(backend_->last_request().prefill_only);
  EXPECT_EQ(registry_.Value("moe_voice_speculative_prefills_total").value_or(-1), 1);
}

TEST_F(RealtimeSessionTest, SpeculativePrefillCanBeTurnedOff) {
  GatewayOptions options;
  options.voice.realtime.speculative_prefill = false;
  Init({}, options);
  auto s = Open();
  s->OnText(kGaSession.dump());
  Append(*s, 960);
  Asr().Emit({.type = Type::kSpeechStarted});
  Asr().Emit({.type = Type::kPartial, .text = "what is the time in paris", .stable_bytes = 20});
  ASSERT_TRUE(backend_->WaitForIdle(absl::Seconds(10)));
  EXPECT_EQ(backend_->num_prefills(), 0);
}

TEST_F(RealtimeSessionTest, BadEventsGetAnErrorEventAndTheSessionGoesOn) {
  Init();
  auto s = Open();
  s->OnText("not json");
  s->OnText(R"({"type":"no.such.event"})");
  s->OnText(R"({"type":"input_audio_buffer.append","audio":"***"})");
  ASSERT_TRUE(ws_->WaitFor("error", absl::Seconds(10), 2).has_value()) << ws_->Types();
  EXPECT_EQ((*ws_->WaitFor("error", absl::Seconds(10), 1))["error"]["code"], "unknown_event");
  s->OnText(kGaSession.dump());
  EXPECT_TRUE(ws_->WaitFor("session.updated").has_value());
  EXPECT_EQ(ws_->close_code(), 0);
}

}  // namespace
}  // namespace moe::gateway
