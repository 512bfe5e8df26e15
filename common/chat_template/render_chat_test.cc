#include "common/chat_template/render_chat.h"

#include <string>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/preset_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::chat_template {
namespace {

using common::testing::IsOkAndHolds;
using common::testing::StatusIs;
using nlohmann::json;

// A template that prints every variable RenderChat provides.
constexpr char kEcho[] =
    "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>"
    "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
    "{% if enable_thinking is defined %}[thinking={{ enable_thinking }}]{% endif %}{{ eos_token }}";

ChatTemplate Parse(std::string_view source, common::Clock& clock = common::SystemClock::Get(),
                   const ChatTemplateOptions& options = {}) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source, clock, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

json User(const std::string& content) { return {{"role", "user"}, {"content", content}}; }

TEST(RenderChatTest, GivesTheTemplateMessagesGenerationPromptAndSpecialTokens) {
  EXPECT_THAT(RenderChat(Parse(kEcho), {.messages = json::array({User("hi")})}, {"<s>", "</s>"}),
              IsOkAndHolds("<s><user>hi</user><assistant></s>"));
  EXPECT_THAT(
      RenderChat(Parse(kEcho),
                 {.messages = json::array({User("hi")}), .add_generation_prompt = false}, {"", ""}),
      IsOkAndHolds("<user>hi</user>"));
}

TEST(RenderChatTest, ExtraContextAddsVariablesButCannotOverrideTheChat) {
  ChatInput input{.messages = json::array({User("hi")}),
                  .extra_context = {{"enable_thinking", false}, {"bos_token", "X"}}};
  EXPECT_THAT(RenderChat(Parse(kEcho), std::move(input), {"<s>", ""}),
              IsOkAndHolds("<s><user>hi</user><assistant>[thinking=False]"));
  EXPECT_THAT(RenderChat(Parse(kEcho), {.extra_context = json::array()}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RenderChatTest, ContinueFinalMessageLeavesTheLastMessageOpen) {
  ChatInput input{.messages = json::array({User("hi"), {{"role", "assistant"}, {"content", "Su"}}}),
                  .continue_final_message = true};
  EXPECT_THAT(RenderChat(Parse(kEcho), std::move(input), {"<s>", "</s>"}),
              IsOkAndHolds("<s><user>hi</user><assistant>Su"));
}

TEST(RenderChatTest, StrftimeNowReadsTheTemplatesClock) {
  common::testing::FakeClock clock(
      absl::FromCivil(absl::CivilSecond(2025, 3, 4, 5, 6, 7), absl::UTCTimeZone()));
  ChatTemplate tmpl =
      Parse("{{ strftime_now('%Y-%m-%d') }}", clock, {.time_zone = absl::UTCTimeZone()});
  EXPECT_THAT(RenderChat(tmpl, {}, {}), IsOkAndHolds("2025-03-04"));
}

TEST(RenderChatTest, TemplateErrorsAreInvalidArgument) {
  EXPECT_THAT(RenderChat(Parse("{{ raise_exception('roles must alternate') }}"), {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

json Msg(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

TEST(RenderChatTest, PresetTemplateWithoutToolsIsThePlainMistralFormat) {
  const ChatTemplate t = Parse(tokenizer::PresetChatTemplate());
  const json chat = json::array({Msg("system", "S"), User("U"), Msg("assistant", "A"), User("V")});
  EXPECT_THAT(RenderChat(t, {.messages = chat}, {"<s>", "</s>"}),
              IsOkAndHolds("<s>[INST] S\n\nU [/INST] A</s>[INST] V [/INST]"));
  EXPECT_THAT(RenderChat(t, {.messages = json::array({User("a"), User("b")})}, {"<s>", "</s>"}),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(RenderChatTest, PresetTemplateRendersToolsCallsAndResults) {
  const ChatTemplate t = Parse(tokenizer::PresetChatTemplate());
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  json call = Msg("assistant", "");
  call["tool_calls"] = json::parse(R"([{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}])");
  json result = Msg("tool", "sunny");
  result["tool_call_id"] = "call_1";
  const json chat = json::array({User("Weather?"), call, result});
  absl::StatusOr<std::string> text =
      RenderChat(t, {.messages = chat, .extra_context = {{"tools", tools}}}, {"<s>", "</s>"});
  ASSERT_TRUE(text.ok()) << text.status();
  // (nlohmann::json sorts keys; the template prints them as it gets them.)
  EXPECT_EQ(*text,
            "<s>[AVAILABLE_TOOLS] [{\"function\": {\"name\": \"get_weather\", \"parameters\": "
            "{\"properties\": {\"city\": {\"type\": \"string\"}}, \"type\": \"object\"}}, "
            "\"type\": \"function\"}] [/AVAILABLE_TOOLS][INST] Weather? [/INST] [TOOL_CALLS] "
            "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]</s>"
            "[TOOL_RESULTS] {\"call_id\": \"call_1\", \"content\": \"sunny\"} [/TOOL_RESULTS]");
}

}  // namespace
}  // namespace moe::chat_template
