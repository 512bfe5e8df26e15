#include "services/gateway/core/openai_request.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::gateway {
namespace {

struct Outcome {
  bool ok;
  CompletionRequest request;
  ApiError error;
};

Outcome Parse(Endpoint endpoint, const std::string& body) {
  Outcome o;
  o.ok = ParseCompletionRequest(endpoint, body, RequestLimits{}, &o.request, &o.error);
  return o;
}
Outcome Chat(const std::string& extra) {
  return Parse(Endpoint::kChatCompletions,
               R"({"model":"m","messages":[{"role":"user","content":"hi"}])" + extra + "}");
}
// "param: status" of a rejection, for one-line assertions.
std::string Rejection(const Outcome& o) {
  if (o.ok) return "accepted";
  return o.error.param.value_or("<none>") + ": " + std::to_string(o.error.http_status);
}

TEST(OpenAiRequestTest, ParsesEveryChatParameter) {
  Outcome o = Chat(R"(,"max_completion_tokens":7,"temperature":0.5,"top_p":0.9,"stop":["a","b"],
      "seed":42,"frequency_penalty":0.1,"presence_penalty":-0.2,"logit_bias":{"5":-100},
      "stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":3,
      "user":"u1","top_k":40,"min_p":0.05,"repetition_penalty":1.1,"ignore_eos":true,
      "stop_token_ids":[9],"skip_special_tokens":false,"n":1,"cache_salt":"s")");
  ASSERT_TRUE(o.ok) << o.error.ToJson();
  const CompletionRequest& r = o.request;
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.messages.dump(), R"([{"content":"hi","role":"user"}])");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_THAT(r.stop, ::testing::ElementsAre("a", "b"));
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, 0.1f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, -0.2f);
  EXPECT_FLOAT_EQ(r.sampling.logit_bias.at(5), -100.0f);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.sampling.returns_logprobs());
  EXPECT_EQ(r.sampling.num_top_logprobs(), 3);
  EXPECT_EQ(r.user, "u1");
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.sampling.ignore_eos);
  EXPECT_THAT(r.sampling.stop_token_ids, ::testing::ElementsAre(9));
  EXPECT_FALSE(r.skip_special_tokens);
  EXPECT_EQ(r.cache_salt, "s");
}

TEST(OpenAiRequestTest, DefaultsFollowOpenAi) {
  Outcome o = Chat("");
  ASSERT_TRUE(o.ok);
  EXPECT_FLOAT_EQ(o.request.sampling.temperature, 1.0f);
  EXPECT_FALSE(o.request.max_tokens.has_value());
  EXPECT_FALSE(o.request.stream);
  EXPECT_TRUE(o.request.skip_special_tokens);
  EXPECT_TRUE(o.request.add_generation_prompt);
}

TEST(OpenAiRequestTest, JoinsTextPartsAndAllowsNullAssistantContent) {
  Outcome o =
      Parse(Endpoint::kChatCompletions,
            R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},
                    {"type":"text","text":"b"}]},{"role":"assistant","content":null}]})");
  ASSERT_TRUE(o.ok) << o.error.ToJson();
  EXPECT_EQ(o.request.messages[0]["content"], "ab");
  EXPECT_EQ(o.request.messages[1]["content"], "");
}

TEST(OpenAiRequestTest, RejectsMalformedJsonAndNonObjects) {
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions, "{not json")), "<none>: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions, "[1,2]")), "<none>: 400");
}

TEST(OpenAiRequestTest, RejectsWrongTypesNamingTheParameter) {
  EXPECT_EQ(Rejection(Chat(R"(,"temperature":"hot")")), "temperature: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"max_tokens":"10")")), "max_tokens: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"max_tokens":1.5)")), "max_tokens: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"stream":1)")), "stream: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"stop":5)")), "stop: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"logit_bias":{"x":1})")), "logit_bias: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"stop_token_ids":[-1])")), "stop_token_ids: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions, R"({"model":3,"messages":[]})")),
            "model: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions,
                            R"({"model":"m","messages":[{"role":"robot","content":"x"}]})")),
            "messages[0].role: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions,
                            R"({"model":"m","messages":[{"role":"user","content":7}]})")),
            "messages[0].content: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kCompletions, R"({"model":"m","prompt":{"a":1}})")),
            "prompt: 400");
}

TEST(OpenAiRequestTest, RejectsValuesOutOfRange) {
  EXPECT_EQ(Rejection(Chat(R"(,"max_tokens":-5)")), "max_tokens: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"max_tokens":0)")), "max_tokens: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"max_completion_tokens":-1)")), "max_completion_tokens: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"temperature":2.5)")), "temperature: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"top_p":0)")), "top_p: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"top_logprobs":21,"logprobs":true)")), "top_logprobs: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"top_logprobs":2)")), "top_logprobs: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"stream_options":{"include_usage":true})")), "stream_options: 400");
}

TEST(OpenAiRequestTest, RejectsUnsupportedParametersByName) {
  EXPECT_EQ(Rejection(Chat(R"(,"n":2)")), "n: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"tools":[{"type":"function","function":{"name":"f"}}])")),
            "tools: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"tool_choice":"auto")")), "tool_choice: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"response_format":{"type":"json_object"})")),
            "response_format: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kCompletions, R"({"model":"m","prompt":"x","echo":true})")),
            "echo: 400");
  // Harmless spellings of the defaults are accepted.
  EXPECT_TRUE(
      Chat(R"(,"n":1,"tools":[],"tool_choice":"none","response_format":{"type":"text"})").ok);
}

TEST(OpenAiRequestTest, ParsesCompletionPrompts) {
  Outcome text = Parse(Endpoint::kCompletions, R"({"model":"m","prompt":"once","logprobs":2})");
  ASSERT_TRUE(text.ok);
  EXPECT_EQ(text.request.prompt_text, "once");
  EXPECT_TRUE(text.request.sampling.returns_logprobs());
  EXPECT_EQ(text.request.sampling.num_top_logprobs(), 2);
  Outcome ids = Parse(Endpoint::kCompletions, R"({"model":"m","prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok);
  EXPECT_TRUE(ids.request.prompt_is_ids);
  EXPECT_THAT(ids.request.prompt_ids, ::testing::ElementsAre(1, 2, 3));
  Outcome nested = Parse(Endpoint::kCompletions, R"({"model":"m","prompt":[[4,5]]})");
  ASSERT_TRUE(nested.ok);
  EXPECT_THAT(nested.request.prompt_ids, ::testing::ElementsAre(4, 5));
  EXPECT_EQ(Rejection(Parse(Endpoint::kCompletions, R"({"model":"m","prompt":["a","b"]})")),
            "prompt: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kCompletions, R"({"model":"m"})")), "prompt: 400");
}

TEST(OpenAiRequestTest, ErrorJsonHasOpenAiShape) {
  Outcome o = Chat(R"(,"n":3)");
  ASSERT_FALSE(o.ok);
  nlohmann::json j = nlohmann::json::parse(o.error.ToJson());
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"]["code"].is_null());
  EXPECT_THAT(j["error"]["message"].get<std::string>(), ::testing::HasSubstr("'n'"));
}

}  // namespace
}  // namespace moe::gateway
