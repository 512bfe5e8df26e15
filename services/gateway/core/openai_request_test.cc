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
  EXPECT_EQ(Rejection(Chat(R"(,"functions":[{"name":"f"}])")), "functions: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"function_call":"auto")")), "function_call: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"guided_grammar":"root ::= x")")), "guided_grammar: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kCompletions, R"({"model":"m","prompt":"x","echo":true})")),
            "echo: 400");
  // Harmless spellings of the defaults are accepted.
  EXPECT_TRUE(
      Chat(R"(,"n":1,"tools":[],"tool_choice":"none","response_format":{"type":"text"})").ok);
}

TEST(OpenAiRequestTest, ParsesResponseFormatsKeepingSchemaKeyOrder) {
  using generation::ConstraintKind;
  Outcome none = Chat(R"(,"response_format":{"type":"text"})");
  ASSERT_TRUE(none.ok);
  EXPECT_FALSE(none.request.constraint.active());
  Outcome obj = Chat(R"(,"response_format":{"type":"json_object"})");
  ASSERT_TRUE(obj.ok);
  EXPECT_EQ(obj.request.constraint.kind, ConstraintKind::kJsonObject);
  EXPECT_EQ(obj.request.constraint_param, "response_format");
  Outcome schema = Chat(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"s",
      "strict":true,"schema":{"type":"object","properties":{"z":{"type":"string"},
      "a":{"type":"integer"}},"required":["z","a"],"additionalProperties":false}}})");
  ASSERT_TRUE(schema.ok) << schema.error.ToJson();
  EXPECT_EQ(schema.request.constraint.kind, ConstraintKind::kJsonSchema);
  // Property order as sent ("z" before "a"): the output is written in it.
  EXPECT_LT(schema.request.constraint.spec.find("\"z\""),
            schema.request.constraint.spec.find("\"a\""));
  Outcome regex = Chat(R"(,"guided_regex":"[a-z]+")");
  ASSERT_TRUE(regex.ok);
  EXPECT_EQ(regex.request.constraint.kind, ConstraintKind::kRegex);
  EXPECT_EQ(regex.request.constraint.spec, "[a-z]+");
  Outcome choice = Chat(R"(,"structured_outputs":{"choice":["yes","no"]})");
  ASSERT_TRUE(choice.ok);
  EXPECT_EQ(choice.request.constraint.kind, ConstraintKind::kChoice);
  EXPECT_THAT(choice.request.constraint.choices, ::testing::ElementsAre("yes", "no"));

  EXPECT_EQ(Rejection(Chat(R"(,"response_format":{"type":"xml"})")), "response_format.type: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"response_format":{"type":"json_schema"})")),
            "response_format.json_schema: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"response_format":{"type":"json_schema","json_schema":{
      "name":"has space","schema":{}}})")),
            "response_format.json_schema.name: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"guided_choice":[])")), "guided_choice: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"response_format":{"type":"json_object"},"guided_regex":"a")")),
            "guided_regex: 400");
}

TEST(OpenAiRequestTest, ParsesToolsToolChoiceAndToolMessages) {
  const std::string tools =
      R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":{
      "type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
      {"type":"function","function":{"name":"now"}}])";
  Outcome auto_choice = Chat(tools);
  ASSERT_TRUE(auto_choice.ok) << auto_choice.error.ToJson();
  EXPECT_EQ(auto_choice.request.tool_choice.mode, ToolChoiceMode::kAuto);
  ASSERT_EQ(auto_choice.request.tool_functions.size(), 2u);
  EXPECT_EQ(auto_choice.request.tool_functions[0].name, "get_weather");
  EXPECT_NE(auto_choice.request.tool_functions[0].parameters_json.find("city"), std::string::npos);
  EXPECT_EQ(auto_choice.request.tool_functions[1].parameters_json, "");
  EXPECT_EQ(auto_choice.request.tools.size(), 2u);

  Outcome required = Chat(tools + R"(,"tool_choice":"required")");
  ASSERT_TRUE(required.ok);
  EXPECT_EQ(required.request.tool_choice.mode, ToolChoiceMode::kRequired);
  Outcome named = Chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"now"}})");
  ASSERT_TRUE(named.ok);
  EXPECT_EQ(named.request.tool_choice.mode, ToolChoiceMode::kNamed);
  EXPECT_EQ(named.request.tool_choice.name, "now");
  Outcome none = Chat(tools + R"(,"tool_choice":"none")");
  ASSERT_TRUE(none.ok);
  EXPECT_EQ(none.request.tool_choice.mode, ToolChoiceMode::kNone);

  EXPECT_EQ(Rejection(Chat(R"(,"tool_choice":"required")")), "tool_choice: 400");
  EXPECT_EQ(
      Rejection(Chat(tools + R"(,"tool_choice":{"type":"function","function":{"name":"x"}})")),
      "tool_choice: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"tools":[{"type":"function","function":{"name":"a b"}}])")),
            "tools[0].function.name: 400");
  EXPECT_EQ(Rejection(Chat(R"(,"tools":[{"type":"function","function":{"name":"f"}},
      {"type":"function","function":{"name":"f"}}])")),
            "tools[1].function.name: 400");
  EXPECT_EQ(Rejection(Chat(
                tools + R"(,"tool_choice":"required","response_format":{"type":"json_object"})")),
            "tool_choice: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kCompletions, R"({"model":"m","prompt":"x","tools":[{}]})")),
            "tools: 400");

  // A multi-turn exchange: the assistant's call (arguments as JSON text) and the tool's answer.
  Outcome turn = Parse(Endpoint::kChatCompletions, R"({"model":"m","messages":[
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
      {"role":"tool","tool_call_id":"call_1","content":"sunny"}])" +
                                                       tools + "}");
  ASSERT_TRUE(turn.ok) << turn.error.ToJson();
  EXPECT_EQ(turn.request.messages[1]["tool_calls"][0]["function"]["arguments"]["city"], "Paris");
  EXPECT_EQ(turn.request.messages[2]["tool_call_id"], "call_1");
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions, R"({"model":"m","messages":[
      {"role":"tool","content":"x"}]})")),
            "messages[0].tool_call_id: 400");
  EXPECT_EQ(Rejection(Parse(Endpoint::kChatCompletions, R"({"model":"m","messages":[
      {"role":"user","content":"x","tool_calls":[]}]})")),
            "messages[0].tool_calls: 400");
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
