#include "common/chat_template/render_chat.h"

#include <string>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
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

}  // namespace
}  // namespace moe::chat_template
