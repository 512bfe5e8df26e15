#include "services/gateway/core/prompt_builder.h"

#include <memory>
#include <string>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "common/tokenizer/testing/sp_tokenizer_json.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/testing/test_tokenizer.h"

namespace moe::gateway {
namespace {

using ::moe::common::testing::IsOkAndHolds;
using Json = nlohmann::json;

// The test tokenizer's template: "{{ bos_token }}" then "<role>content\n" per message, then
// "<assistant>" with the generation prompt.
CompletionRequest Chat(Json messages) {
  CompletionRequest r;
  r.endpoint = Endpoint::kChatCompletions;
  r.messages = std::move(messages);
  return r;
}

Json Msg(const std::string& role, const std::string& content) {
  return {{"role", role}, {"content", content}};
}

TEST(PromptBuilderTest, RendersTheModelsTemplateAndTokenizesWithoutAddingSpecialTokens) {
  std::unique_ptr<tokenizer::Tokenizer> tok = testing::MakeTestTokenizer();
  common::testing::FakeClock clock;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptBuilder> builder,
                       PromptBuilder::Create(*tok, "chatml", clock));
  EXPECT_EQ(builder->template_source(), "model");
  const CompletionRequest request = Chat(Json::array({Msg("user", "hi")}));
  EXPECT_THAT(builder->RenderChat(request), IsOkAndHolds("<s><user>hi\n<assistant>"));
  EXPECT_THAT(builder->Build(request),
              IsOkAndHolds(tok->Encode("<s><user>hi\n<assistant>", /*add_special_tokens=*/false)));
}

TEST(PromptBuilderTest, ContinueFinalMessageLeavesTheAssistantTurnOpen) {
  std::unique_ptr<tokenizer::Tokenizer> tok = testing::MakeTestTokenizer();
  common::testing::FakeClock clock;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptBuilder> builder,
                       PromptBuilder::Create(*tok, "chatml", clock));
  CompletionRequest request = Chat(Json::array({Msg("user", "hi"), Msg("assistant", "Su")}));
  request.continue_final_message = true;
  EXPECT_THAT(builder->RenderChat(request), IsOkAndHolds("<s><user>hi\n<assistant>Su"));
}

TEST(PromptBuilderTest, UsesTheNamedFallbackWhenTheModelShipsNoTemplate) {
  auto tok = tokenizer::Tokenizer::FromJson(
      tokenizer::testing::SentencePieceTokenizerJson({tokenizer::testing::kSpacePiece}, {}).dump(),
      tokenizer::testing::SentencePieceConfigJson("").dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  common::testing::FakeClock clock;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<PromptBuilder> builder,
                       PromptBuilder::Create(**tok, "chatml", clock));
  EXPECT_EQ(builder->template_source(), "fallback:chatml");
  EXPECT_THAT(builder->RenderChat(Chat(Json::array({Msg("user", "hi")}))),
              IsOkAndHolds("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_FALSE(PromptBuilder::Create(**tok, "no-such-template", clock).ok());
}

}  // namespace
}  // namespace moe::gateway
