#include "services/gateway/core/tool_calls.h"

#include <string>
#include <vector>

#include "common/grammar/testing/grammar_test_util.h"
#include "common/grammar/testing/test_vocabulary.h"
#include "common/metrics/registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {
namespace {

struct Fed {
  std::string content;
  // Reassembled from the deltas as a client does: by index, id/name from the first piece.
  std::vector<ToolCall> from_deltas;
  std::vector<ToolCall> calls;
};

// Feeds `text` in pieces of `piece` bytes, then finishes.
Fed Feed(ToolCallParser& p, const std::string& text, size_t piece) {
  Fed f;
  auto take = [&](ToolCallParser::Output o) {
    f.content += o.content;
    for (const ToolCallDelta& d : o.deltas) {
      if (static_cast<size_t>(d.index) >= f.from_deltas.size()) {
        ASSERT_EQ(static_cast<size_t>(d.index), f.from_deltas.size());
        ASSERT_FALSE(d.id.empty()) << "the first piece of a call carries its id";
        f.from_deltas.push_back({.id = d.id, .name = d.name});
      } else {
        EXPECT_TRUE(d.id.empty());
      }
      f.from_deltas[static_cast<size_t>(d.index)].arguments += d.arguments;
    }
  };
  for (size_t i = 0; i < text.size(); i += piece) take(p.Add(text.substr(i, piece)));
  take(p.Finish());
  f.calls = p.calls();
  return f;
}

ToolCallParser Parser(ToolCallMode mode, ToolCallFormat format = ToolCallFormat::kNone) {
  return ToolCallParser(mode, format, {"get_weather", "now"}, "get_weather", 7);
}

TEST(ToolCallParserTest, RequiredCallsStreamNameFirstThenTheArgumentsAsGenerated) {
  const std::string text =
      R"([{"name": "get_weather", "arguments": {"city": "P}a\"ris", "days": [1, 2]}  },)"
      R"( {"name":"now","arguments":{}}])";
  for (size_t piece : {1, 3, 1000}) {
    ToolCallParser p = Parser(ToolCallMode::kRequired);
    Fed f = Feed(p, text, piece);
    EXPECT_EQ(f.content, "");
    ASSERT_EQ(f.calls.size(), 2u) << piece;
    EXPECT_EQ(f.calls[0].name, "get_weather");
    EXPECT_EQ(f.calls[0].arguments, R"({"city": "P}a\"ris", "days": [1, 2]})");
    EXPECT_EQ(f.calls[1].name, "now");
    EXPECT_EQ(f.calls[1].arguments, "{}");
    ASSERT_EQ(f.from_deltas.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(f.from_deltas[i].id, f.calls[i].id);
      EXPECT_EQ(f.from_deltas[i].name, f.calls[i].name);
      EXPECT_EQ(f.from_deltas[i].arguments, f.calls[i].arguments);
    }
    EXPECT_NE(f.calls[0].id, f.calls[1].id);
    EXPECT_THAT(f.calls[0].id, ::testing::StartsWith("call_"));
  }
}

TEST(ToolCallParserTest, NamedOutputIsTheArguments) {
  ToolCallParser p = Parser(ToolCallMode::kNamed);
  Fed f = Feed(p, R"({"city":"Rome"})", 2);
  ASSERT_EQ(f.calls.size(), 1u);
  EXPECT_EQ(f.calls[0].name, "get_weather");
  EXPECT_EQ(f.calls[0].arguments, R"({"city":"Rome"})");
  EXPECT_EQ(f.from_deltas[0].arguments, f.calls[0].arguments);
}

TEST(ToolCallParserTest, AutoFindsEachFormatAndKeepsTheTextBefore) {
  struct Case {
    ToolCallFormat format;
    std::string text;
    std::string content;
  };
  const std::vector<Case> cases = {
      {ToolCallFormat::kMistral,
       R"(Sure. [TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Oslo"}}])", "Sure. "},
      {ToolCallFormat::kHermes,
       "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
       "\"Oslo\"}}\n</tool_call>",
       "Let me check.\n"},
      {ToolCallFormat::kLlama3, R"({"name": "get_weather", "parameters": {"city": "Oslo"}})", ""},
      {ToolCallFormat::kLlama3,
       R"(<|python_tag|>{"name": "get_weather", "parameters": {"city": "Oslo"}})", ""},
  };
  for (const Case& c : cases) {
    for (size_t piece : {1, 4, 1000}) {
      ToolCallParser p = Parser(ToolCallMode::kAuto, c.format);
      Fed f = Feed(p, c.text, piece);
      EXPECT_EQ(f.content, c.content) << c.text;
      ASSERT_EQ(f.calls.size(), 1u) << c.text;
      EXPECT_EQ(f.calls[0].name, "get_weather");
      EXPECT_EQ(f.calls[0].arguments, R"({"city":"Oslo"})");
      ASSERT_EQ(f.from_deltas.size(), 1u);
      EXPECT_EQ(f.from_deltas[0].arguments, f.calls[0].arguments);
    }
  }
}

TEST(ToolCallParserTest, AutoTextThatIsNotACallStaysContent) {
  const std::vector<std::pair<ToolCallFormat, std::string>> cases = {
      {ToolCallFormat::kMistral, "a [TOOL] b [TOOL_CALL"},
      {ToolCallFormat::kMistral, R"([TOOL_CALLS] [{"name": "unknown", "arguments": {}}])"},
      {ToolCallFormat::kMistral, "[TOOL_CALLS] not json"},
      {ToolCallFormat::kHermes, "<tool_call>{\"name\": \"now\""},
      {ToolCallFormat::kLlama3, "{not a call}"},
      {ToolCallFormat::kNone, R"([TOOL_CALLS] [{"name": "now", "arguments": {}}])"},
  };
  for (const auto& [format, text] : cases) {
    ToolCallParser p = Parser(ToolCallMode::kAuto, format);
    Fed f = Feed(p, text, 3);
    EXPECT_EQ(f.content, text);
    EXPECT_TRUE(f.calls.empty()) << text;
    EXPECT_TRUE(f.from_deltas.empty());
  }
}

TEST(ToolCallFormatTest, DetectedFromTheChatTemplate) {
  EXPECT_EQ(DetectToolCallFormat("{{ '[TOOL_CALLS] ' }}"), ToolCallFormat::kMistral);
  EXPECT_EQ(DetectToolCallFormat("<tool_call>\n{{ tool_call | tojson }}"), ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat("<|start_header_id|>ipython"), ToolCallFormat::kLlama3);
  EXPECT_EQ(DetectToolCallFormat("{{ messages }}"), ToolCallFormat::kNone);
  EXPECT_EQ(*ResolveToolCallFormat("hermes", ""), ToolCallFormat::kHermes);
  EXPECT_FALSE(ResolveToolCallFormat("xml", "").ok());
}

CompletionRequest WithTools(ToolChoice choice, bool parallel = true) {
  CompletionRequest r;
  r.tool_functions = {
      {.name = "get_weather",
       .parameters_json =
           R"({"type":"object","properties":{"loc":{"$ref":"#/$defs/Loc"}},)"
           R"("required":["loc"],"$defs":{"Loc":{"type":"string","enum":["Oslo","Rome"]}}})"},
      {.name = "now"}};
  r.tool_choice = std::move(choice);
  r.parallel_tool_calls = parallel;
  return r;
}

TEST(ToolChoiceConstraintTest, RequiredAcceptsCallsOfDeclaredToolsOnly) {
  common::metrics::Registry registry;
  auto vocab = grammar::testing::ByteVocabulary();
  std::optional<generation::Constraint> c =
      ToolChoiceConstraint(WithTools({.mode = ToolChoiceMode::kRequired}));
  ASSERT_TRUE(c.has_value());
  auto g = grammar::testing::CompileForTest(*c, vocab, registry);
  ASSERT_TRUE(g.ok()) << g.status() << "\n" << c->spec;
  EXPECT_TRUE((*g)->Matches(R"([{"name":"get_weather","arguments":{"loc":"Oslo"}}])"));
  EXPECT_TRUE((*g)->Matches(
      R"([{"name":"now","arguments":{}},{"name":"get_weather","arguments":{"loc":"Rome"}}])"));
  EXPECT_FALSE((*g)->Matches(R"([])"));
  EXPECT_FALSE((*g)->Matches(R"([{"name":"get_weather","arguments":{"loc":"Paris"}}])"));
  EXPECT_FALSE((*g)->Matches(R"([{"name":"other","arguments":{}}])"));

  std::optional<generation::Constraint> one =
      ToolChoiceConstraint(WithTools({.mode = ToolChoiceMode::kRequired}, /*parallel=*/false));
  auto g1 = grammar::testing::CompileForTest(*one, vocab, registry);
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_FALSE((*g1)->Matches(R"([{"name":"now","arguments":{}},{"name":"now","arguments":{}}])"));
}

TEST(ToolChoiceConstraintTest, NamedIsTheFunctionsParametersAndNoneOrAutoHaveNone) {
  common::metrics::Registry registry;
  std::optional<generation::Constraint> c =
      ToolChoiceConstraint(WithTools({.mode = ToolChoiceMode::kNamed, .name = "get_weather"}));
  ASSERT_TRUE(c.has_value());
  auto g = grammar::testing::CompileForTest(*c, grammar::testing::ByteVocabulary(), registry);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE((*g)->Matches(R"({"loc":"Rome"})"));
  EXPECT_FALSE((*g)->Matches(R"({"loc":"Bern"})"));
  std::optional<generation::Constraint> now =
      ToolChoiceConstraint(WithTools({.mode = ToolChoiceMode::kNamed, .name = "now"}));
  auto gn = grammar::testing::CompileForTest(*now, grammar::testing::ByteVocabulary(), registry);
  ASSERT_TRUE(gn.ok()) << gn.status();
  EXPECT_TRUE((*gn)->Matches("{}"));
  EXPECT_FALSE(ToolChoiceConstraint(WithTools({.mode = ToolChoiceMode::kAuto})).has_value());
  EXPECT_FALSE(ToolChoiceConstraint(WithTools({.mode = ToolChoiceMode::kNone})).has_value());
}

}  // namespace
}  // namespace moe::gateway
