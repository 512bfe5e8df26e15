#include "services/gateway/core/realtime_protocol.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

TEST(RealtimeProtocolTest, GaSessionShapeIsParsedAndSwitchesToGa) {
  RealtimeSessionConfig c;
  RealtimeFlavor flavor = RealtimeFlavor::kBeta;
  const Json session = Json::parse(R"({
    "type": "realtime", "instructions": "be brief", "output_modalities": ["text"],
    "max_output_tokens": 32,
    "audio": {"input": {"format": {"type": "audio/pcm", "rate": 24000},
                        "transcription": {"model": "whisper-1"},
                        "turn_detection": {"type": "server_vad", "silence_duration_ms": 400,
                                           "create_response": false}},
              "output": {"voice": "echo", "speed": 1.5}}})");
  ASSERT_TRUE(ApplySessionUpdate(session, &c, &flavor).ok());
  EXPECT_EQ(flavor, RealtimeFlavor::kGa);
  EXPECT_FALSE(c.audio_out);
  EXPECT_EQ(c.instructions, "be brief");
  EXPECT_EQ(c.max_output_tokens, 32);
  EXPECT_TRUE(c.transcribe_input);
  EXPECT_EQ(c.turn.silence_duration_ms, 400);
  EXPECT_FALSE(c.turn.create_response);
  EXPECT_EQ(c.voice, "echo");
  EXPECT_FLOAT_EQ(c.speed, 1.5f);
  const Json out = SessionJson(c, flavor, "sess_1", "small");
  EXPECT_EQ(out["type"], "realtime");
  EXPECT_EQ(out["audio"]["input"]["turn_detection"]["silence_duration_ms"], 400);
  EXPECT_FALSE(out.contains("modalities"));
}

TEST(RealtimeProtocolTest, BetaSessionShapeIsParsedAndSwitchesToBeta) {
  RealtimeSessionConfig c;
  RealtimeFlavor flavor = RealtimeFlavor::kGa;
  const Json session = Json::parse(R"({
    "modalities": ["text", "audio"], "voice": "alloy", "input_audio_format": "pcm16",
    "input_audio_transcription": {"model": "whisper-1"}, "turn_detection": null,
    "max_response_output_tokens": "inf"})");
  ASSERT_TRUE(ApplySessionUpdate(session, &c, &flavor).ok());
  EXPECT_EQ(flavor, RealtimeFlavor::kBeta);
  EXPECT_TRUE(c.audio_out);
  EXPECT_FALSE(c.turn.server_vad);
  EXPECT_EQ(c.max_output_tokens, 0);
  const Json out = SessionJson(c, flavor, "sess_1", "small");
  EXPECT_EQ(out["object"], "realtime.session");
  EXPECT_EQ(out["modalities"], Json({"text", "audio"}));
  EXPECT_TRUE(out["turn_detection"].is_null());
  EXPECT_FALSE(out.contains("audio"));
}

TEST(RealtimeProtocolTest, BadFieldsAreNamedAndLeaveTheConfig) {
  RealtimeSessionConfig c;
  c.instructions = "keep";
  RealtimeFlavor flavor = RealtimeFlavor::kBeta;
  absl::Status s = ApplySessionUpdate(
      Json::parse(R"({"instructions": "new", "input_audio_format": "g711_ulaw"})"), &c, &flavor);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("session.input_audio_format"));
  EXPECT_EQ(c.instructions, "keep");
  s = ApplySessionUpdate(Json::parse(R"({"type": "realtime", "audio": {"input": {"format":
      {"type": "audio/pcm", "rate": 16000}}}})"),
                         &c, &flavor);
  EXPECT_THAT(std::string(s.message()), HasSubstr("audio.input.format"));
  s = ApplySessionUpdate(Json::parse(R"({"temperature": 7})"), &c, &flavor);
  EXPECT_THAT(std::string(s.message()), HasSubstr("session.temperature"));
  s = ApplySessionUpdate(Json::parse(R"({"tools": [{"type": "function"}]})"), &c, &flavor);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tools"));
}

TEST(RealtimeProtocolTest, EventNamesDifferByFlavourOnly) {
  EXPECT_STREQ(NamesFor(RealtimeFlavor::kBeta).audio_delta, "response.audio.delta");
  EXPECT_STREQ(NamesFor(RealtimeFlavor::kGa).audio_delta, "response.output_audio.delta");
  EXPECT_STREQ(NamesFor(RealtimeFlavor::kBeta).item_added, "conversation.item.created");
  EXPECT_STREQ(NamesFor(RealtimeFlavor::kGa).transcript_delta,
               "response.output_audio_transcript.delta");
}

}  // namespace
}  // namespace moe::gateway
