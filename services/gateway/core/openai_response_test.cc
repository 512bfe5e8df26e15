#include "services/gateway/core/openai_response.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

using ::moe::generation::FinishReason;
using ::moe::generation::Usage;
using Json = nlohmann::json;

ResponseMeta Meta(Endpoint e) { return ResponseMeta{e, "chatcmpl-1", 1700000000, "tiny"}; }

TEST(OpenAiResponseTest, ChatResponseShape) {
  Usage usage{12, 5, 8};
  Json j = Json::parse(RenderResponse(Meta(Endpoint::kChatCompletions), "hello",
                                      FinishReason::kStop, usage, nullptr));
  EXPECT_EQ(j["id"], "chatcmpl-1");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["created"], 1700000000);
  EXPECT_EQ(j["model"], "tiny");
  ASSERT_EQ(j["choices"].size(), 1u);
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"].dump(),
            R"({"completion_tokens":5,"prompt_tokens":12,"prompt_tokens_details":)"
            R"({"cached_tokens":8},"total_tokens":17})");
}

TEST(OpenAiResponseTest, ChatLogprobsCarryTokensBytesAndAlternatives) {
  std::vector<RenderedLogprob> lps = {{"hi", -0.25f, {{"hi", -0.25f}, {"ho", -2.0f}}, 0}};
  Json j = Json::parse(RenderResponse(Meta(Endpoint::kChatCompletions), "hi", FinishReason::kLength,
                                      Usage{1, 1, 0}, &lps));
  const Json& c = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(c["token"], "hi");
  EXPECT_FLOAT_EQ(c["logprob"].get<float>(), -0.25f);
  EXPECT_EQ(c["bytes"].dump(), "[104,105]");
  EXPECT_EQ(c["top_logprobs"][1]["token"], "ho");
}

TEST(OpenAiResponseTest, CompletionLogprobsUseLegacyShape) {
  std::vector<RenderedLogprob> lps = {{"a", -1.0f, {{"a", -1.0f}, {"b", -3.0f}}, 0},
                                      {"c", -0.5f, {}, 1}};
  Json j = Json::parse(RenderResponse(Meta(Endpoint::kCompletions), "ac", FinishReason::kLength,
                                      Usage{1, 2, 0}, &lps));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["choices"][0]["text"], "ac");
  const Json& l = j["choices"][0]["logprobs"];
  EXPECT_EQ(l["tokens"].dump(), R"(["a","c"])");
  EXPECT_EQ(l["token_logprobs"].dump(), "[-1.0,-0.5]");
  EXPECT_EQ(l["top_logprobs"][0].dump(), R"({"a":-1.0,"b":-3.0})");
  EXPECT_EQ(l["text_offset"].dump(), "[0,1]");
}

TEST(OpenAiResponseTest, ChatChunksFollowTheStreamingShape) {
  ResponseMeta m = Meta(Endpoint::kChatCompletions);
  Json first = Json::parse(RenderChunk(m, true, "", FinishReason::kNone, nullptr, false));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"].dump(), R"({"content":"","role":"assistant"})");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  Json mid = Json::parse(RenderChunk(m, false, "x", FinishReason::kNone, nullptr, true));
  EXPECT_EQ(mid["choices"][0]["delta"].dump(), R"({"content":"x"})");
  EXPECT_TRUE(mid["usage"].is_null());
  Json last = Json::parse(RenderChunk(m, false, "", FinishReason::kLength, nullptr, false));
  EXPECT_EQ(last["choices"][0]["delta"].dump(), "{}");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  Json usage = Json::parse(RenderUsageChunk(m, Usage{3, 4, 0}));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
}

TEST(OpenAiResponseTest, SseFraming) {
  EXPECT_EQ(SseEvent("{}"), "data: {}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
}

TEST(OpenAiResponseTest, InvalidUtf8IsReplacedNotFatal) {
  Json j = Json::parse(
      RenderResponse(Meta(Endpoint::kCompletions), "a\xC3", FinishReason::kStop, Usage{}, nullptr));
  EXPECT_EQ(j["choices"][0]["text"], "a\xEF\xBF\xBD");
}

}  // namespace
}  // namespace moe::gateway
