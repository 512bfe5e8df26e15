#include "common/chat_template/chat_template.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::chat_template {
namespace {

using common::testing::StatusIs;
using nlohmann::json;
using ::testing::HasSubstr;

// Renders `source` with `context`; returns the output or "ERROR: <message>".
template <typename Json = json>
std::string R(std::string_view source, const Json& context = Json::object()) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(source, common::SystemClock::Get());
  if (!t.ok()) return "ERROR: " + std::string(t.status().message());
  absl::StatusOr<std::string> out = t->Render(context);
  if (!out.ok()) return "ERROR: " + std::string(out.status().message());
  return *out;
}

TEST(ChatTemplateTest, WhitespaceControlAsTransformersConfiguresJinja) {
  // trim_blocks: newline after a block tag goes; lstrip_blocks: indentation before it goes.
  EXPECT_EQ(R("{% if true %}\n  yes\n  {% endif %}\nend"), "  yes\nend");
  // Expressions are not blocks: no trimming around {{ }}.
  EXPECT_EQ(R("  {{ 'a' }}\nb"), "  a\nb");
  EXPECT_EQ(R("a  {{- 'b' -}}  \n c"), "abc");
  EXPECT_EQ(R("a\n  {%- if true -%}\n  b  {%- endif %}"), "ab");
  // `+` keeps the indentation; comments strip like blocks.
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(R("a\n  {# note #}\nb"), "a\nb");
  // One trailing newline of the template is dropped (keep_trailing_newline=False).
  EXPECT_EQ(R("x\n"), "x");
  EXPECT_EQ(R("x\n\n"), "x\n");
  EXPECT_EQ(R("{% raw %}{{ not evaluated }}{% endraw %}"), "{{ not evaluated }}");
}

TEST(ChatTemplateTest, PythonFormattingOfValues) {
  EXPECT_EQ(R("{{ none }}|{{ true }}|{{ False }}|{{ undefined_name }}"), "None|True|False|");
  EXPECT_EQ(R("{{ 1.0 }} {{ 1/4 }} {{ 1/3 }} {{ 10/2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }}"),
            "1.0 0.25 0.3333333333333333 5.0 3 -4 2");
  EXPECT_EQ(R("{{ 1e20 }} {{ 0.0001 }} {{ 0.00001 }} {{ 2 ** 10 }} {{ 1.5e3 }}"),
            "1e+20 0.0001 1e-05 1024 1500.0");
  EXPECT_EQ(R("{{ [1, 'a', none, true] }} {{ {'k': \"it's\"} }}"),
            "[1, 'a', None, True] {'k': \"it's\"}");
  EXPECT_EQ(R("{{ 'a' ~ 1 ~ none }}"), "a1None");
}

TEST(ChatTemplateTest, StringLiteralEscapes) {
  EXPECT_EQ(R(R"({{ 'a\nb\t\'c\' \"d\" \\ \x41\u00e9 \d' }})"), "a\nb\t'c' \"d\" \\ A\u00e9 \\d");
  EXPECT_EQ(R("{{ 'con' \"cat\" }}"), "concat");
}

TEST(ChatTemplateTest, ForLoopsAndLoopVariables) {
  json ctx = {{"xs", {"a", "b", "c"}}, {"d", {{"k1", 1}, {"k2", 2}}}};
  EXPECT_EQ(R("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ x }}"
              "{% if loop.first %}F{% endif %}{% if loop.last %}L{{ loop.length }}{% endif %}"
              "{% endfor %}",
              ctx),
            "10aF21b32cL3");
  EXPECT_EQ(R("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", ctx), "k1=1;k2=2;");
  EXPECT_EQ(R("{% for k in d %}{{ k }}{% endfor %}", ctx), "k1k2");
  EXPECT_EQ(R("{% for x in xs if x != 'b' %}{{ loop.index }}{{ x }}{% endfor %}", ctx), "1a2c");
  EXPECT_EQ(R("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(R("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{{ x }}"
              "{% if x == 'c' %}{% break %}{% endif %}{% endfor %}",
              ctx),
            "ac");
  EXPECT_EQ(R("{% for x in xs %}{{ loop.previtem }}>{{ x }} {% endfor %}", ctx), ">a a>b b>c ");
}

TEST(ChatTemplateTest, SetIsScopedToLoopIterationButNamespacesAreShared) {
  EXPECT_EQ(
      R("{% set n = 0 %}{% for i in range(3) %}{% set n = n + 1 %}{{ n }}{% endfor %}{{ n }}"),
      "1110");
  EXPECT_EQ(R("{% set ns = namespace(n=0, s='') %}{% for i in range(3) %}"
              "{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
  EXPECT_EQ(R("{% if true %}{% set x = 5 %}{% endif %}{{ x }}"), "5");
  EXPECT_EQ(R("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(R("{% set block %}in {{ 1 + 1 }}{% endset %}[{{ block }}]"), "[in 2]");
}

TEST(ChatTemplateTest, MacrosAndCallBlocks) {
  EXPECT_EQ(R("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
              "{{ greet('A') }} {{ greet('B', punct='?') }} {{ greet(name='C') }}"),
            "Hi A! Hi B? Hi C!");
  EXPECT_EQ(R("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}x{% endcall %}"),
            "<x>");
  EXPECT_EQ(R("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(ChatTemplateTest, OperatorsAndTests) {
  EXPECT_EQ(R("{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in {'k': 1} }}{{ 3 not in [1] }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 1 == 1.0 }}{{ 'a' < 'b' }}{{ [1, 2] == [1, 2] }}{{ not 0 }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(R("{{ 'ab' * 3 }} {{ [1] + [2] }} {{ 'x' if false else 'y' }} {{ 0 or 'z' }}"),
            "ababab [1, 2] y z");
  EXPECT_EQ(R("{{ x is defined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"
              "{{ [] is iterable }}{{ 3 is odd }}{{ 4 is divisibleby 2 }}{{ 1 is equalto 1 }}"
              "{{ x is not defined }}"),
            "FalseTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(R("{{ -2 | abs }} {{ not true == false }}"), "2 True");
  EXPECT_THAT(R("{{ 'a' + 1 }}"), HasSubstr("unsupported operand types for +: 'str' and 'int'"));
  EXPECT_THAT(R("{{ 1 // 0 }}"), HasSubstr("division or modulo by zero"));
}

TEST(ChatTemplateTest, SlicingAndIndexing) {
  json ctx = {{"xs", {1, 2, 3, 4}}, {"s", "h\u00e9llo"}};
  EXPECT_EQ(
      R("{{ xs[::-1] }} {{ xs[1:] }} {{ xs[:-1] }} {{ xs[::2] }} {{ xs[-1] }} {{ xs[9] }}", ctx),
      "[4, 3, 2, 1] [2, 3, 4] [1, 2, 3] [1, 3] 4 ");
  EXPECT_EQ(R("{{ s[::-1] }} {{ s[1] }} {{ s | length }} {{ s[1:3] }}", ctx),
            "oll\u00e9h \u00e9 5 \u00e9l");
  EXPECT_EQ(R("{{ xs.0 }}{{ xs['0'] }}", ctx), "1");
}

TEST(ChatTemplateTest, StringMethodsFollowPython) {
  // strip(chars) strips only those characters (HF's JS renderer ignores the argument).
  EXPECT_EQ(R("[{{ '\\n  x  \\n'.strip('\\n') }}]"), "[  x  ]");
  EXPECT_EQ(R("[{{ ' \\t x \\u3000'.strip() }}][{{ 'xxaxx'.lstrip('x') }}][{{ 'a  '.rstrip() }}]"),
            "[x][axx][a]");
  EXPECT_EQ(R("{{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ ' a  b '.split() }}"
              " {{ 'a,b,c'.split(',', 1) }}"),
            "c ['a', 'b'] ['a', 'b,c']");
  EXPECT_EQ(R("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'abc'.upper() }}"
              "{{ 'hello world'.title() }}{{ 'aXb'.replace('X', '-') }}{{ 'abc'.find('c') }}"),
            "TrueTrueABCHello Worlda-b2");
  json ctx = {{"m", {{"role", "user"}}}};
  EXPECT_EQ(R("{{ m.get('role') }} {{ m.get('x', 'dflt') }} {{ m.get('y') }} {{ m['role'] }}", ctx),
            "user dflt None user");
}

TEST(ChatTemplateTest, Filters) {
  // ordered_json keeps the key order of the input, as Python dicts do.
  nlohmann::ordered_json ctx = {{"msgs",
                                 {{{"role", "system"}, {"content", "S"}},
                                  {{"role", "user"}, {"content", "U"}},
                                  {{"role", "user"}, {"content", "V"}, {"name", "bob"}}}},
                                {"d", {{"b", 2}, {"a", {1, 2}}}}};
  EXPECT_EQ(R("{{ '  x  ' | trim }}|{{ msgs | length }}|{{ 'Ab' | lower }}{{ 'ab' | upper }}", ctx),
            "x|3|abAB");
  EXPECT_EQ(R("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | "
              "join(',') }} {{ msgs | rejectattr('role', 'equalto', 'user') | list | length }} "
              "{{ msgs | selectattr('name') | first | attr('content') }} "
              "{{ (msgs | last).content }}",
              ctx),
            "U,V 1 V V");
  EXPECT_EQ(
      R("{{ d | tojson }} {{ d | tojson(sort_keys=true) }} {{ 'caf\u00e9 \"q\"\\n' | tojson }}",
        ctx),
      "{\"b\": 2, \"a\": [1, 2]} {\"a\": [1, 2], \"b\": 2} \"caf\u00e9 \\\"q\\\"\\n\"");
  EXPECT_EQ(R("{{ d | tojson(indent=2) }}", ctx),
            "{\n  \"b\": 2,\n  \"a\": [\n    1,\n    2\n  ]\n}");
  EXPECT_EQ(R("{{ {'x': 1.0, 'e': '\u00e9'} | tojson(ensure_ascii=true) }}"),
            "{\"x\": 1.0, \"e\": \"\\u00e9\"}");
  EXPECT_EQ(R("{{ nope | default('dflt') }} {{ '' | default('e', true) }} {{ 5 | string }}"
              " {{ [3, 1, 2] | sort | join }} {{ 'a-b' | replace('-', '+') }}"
              " {{ d | items | list | length }} {{ [1, 1, 2] | unique | list }}",
              ctx),
            "dflt e 5 123 a+b 2 [1, 2]");
  EXPECT_EQ(R("{{ 'a\\nb' | indent(2) }}|{{ '4.5' | float }}|{{ '7' | int + 1 }}"), "a\n  b|4.5|8");
}

TEST(ChatTemplateTest, ErrorsCarryLineAndColumnAndNeverCrash) {
  EXPECT_THAT(R("ab\n  {{ x"), HasSubstr("line 2, column 3"));
  EXPECT_THAT(R("{% if x %}never closed"), HasSubstr("expected '{% endif %}'"));
  EXPECT_THAT(R("{{ 'unterminated }}"), HasSubstr("unterminated string literal"));
  EXPECT_THAT(R("{# unterminated comment"), HasSubstr("unterminated comment"));
  EXPECT_THAT(R("{% include 'x' %}"), HasSubstr("unknown or unexpected tag 'include'"));
  EXPECT_THAT(R("{% endfor %}"), HasSubstr("unknown or unexpected tag 'endfor'"));
  // Unknown filters and tests fail at parse time, even in branches never taken (as in Jinja).
  EXPECT_THAT(R("line1\n{% if false %}{{ x | no_such_filter }}{% endif %}"),
              HasSubstr("line 2, column 20: no filter named"));
  EXPECT_THAT(R("{{ x | no_such_filter }}"), HasSubstr("no filter named 'no_such_filter'"));
  EXPECT_THAT(R("{{ x is no_such_test }}"), HasSubstr("no test named 'no_such_test'"));
  EXPECT_THAT(R("{{ nope() }}"), HasSubstr("'nope' is undefined"));
  EXPECT_THAT(R("{% break %}"), HasSubstr("outside a loop"));
  EXPECT_THAT(R("{{ raise_exception('Roles must alternate') }}"),
              HasSubstr("raise_exception: Roles must alternate"));
  EXPECT_THAT(R("{{ 1 @ 2 }}"), HasSubstr("unexpected character '@'"));
  EXPECT_THAT(R("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"),
              HasSubstr("too deeply"));
  EXPECT_THAT(R("{{" + std::string(3000, '[')), HasSubstr("ERROR"));
  // Every prefix of a real-looking template parses or fails cleanly.
  const std::string source(*FallbackTemplate("mistral"));
  for (size_t n = 0; n <= source.size(); ++n) {
    absl::StatusOr<ChatTemplate> t =
        ChatTemplate::Parse(source.substr(0, n), common::SystemClock::Get());
    if (t.ok()) {
      (void)t->Render(json{{"messages", {{{"role", "user"}, {"content", "x"}}}}});
    }
  }
}

TEST(ChatTemplateTest, LimitsStopRunawayTemplates) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse(
      "{% for i in range(100000000) %}x{% endfor %}", common::SystemClock::Get());
  ASSERT_OK(t.status());
  EXPECT_THAT(t->Render(json::object()), StatusIs(absl::StatusCode::kResourceExhausted));
  t = ChatTemplate::Parse("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
                          common::SystemClock::Get());
  ASSERT_OK(t.status());
  EXPECT_THAT(t->Render(json::object()), StatusIs(absl::StatusCode::kResourceExhausted));
  t = ChatTemplate::Parse(
      "{% for i in range(1000) %}{% for j in range(1000) %}{% for k in "
      "range(1000) %}{% endfor %}{% endfor %}{% endfor %}",
      common::SystemClock::Get(), {.max_steps = 100'000});
  ASSERT_OK(t.status());
  EXPECT_THAT(t->Render(json::object()), StatusIs(absl::StatusCode::kResourceExhausted));
  t = ChatTemplate::Parse("{{ 'x' * 100000000 }}", common::SystemClock::Get(),
                          {.max_output_bytes = 1000});
  ASSERT_OK(t.status());
  EXPECT_THAT(t->Render(json::object()), StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(ChatTemplate::Parse("x", common::SystemClock::Get(), {.max_steps = 0}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChatTemplateTest, StrftimeNowUsesTheInjectedClock) {
  common::testing::FakeClock clock(
      absl::FromCivil(absl::CivilSecond(2024, 7, 26, 10, 5, 0), absl::UTCTimeZone()));
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Parse("{{ strftime_now('%d %b %Y %H:%M') }}",
                                                       clock, {.time_zone = absl::UTCTimeZone()});
  ASSERT_OK(t.status());
  EXPECT_THAT(t->Render(json::object()), common::testing::IsOkAndHolds("26 Jul 2024 10:05"));
}

TEST(ChatTemplateTest, FallbackTemplates) {
  const json ctx = {{"messages",
                     {{{"role", "system"}, {"content", "S"}},
                      {{"role", "user"}, {"content", "U"}},
                      {{"role", "assistant"}, {"content", "A"}},
                      {{"role", "user"}, {"content", "V"}}}},
                    {"add_generation_prompt", true},
                    {"bos_token", "<s>"},
                    {"eos_token", "</s>"}};
  EXPECT_EQ(R(*FallbackTemplate("chatml"), ctx),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n<|im_start|>user\nV<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(R(*FallbackTemplate("mistral"), ctx), "<s>[INST] S\n\nU [/INST]A</s>[INST] V [/INST]");
  EXPECT_EQ(R(*FallbackTemplate("llama3"), ctx),
            "<s><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nU<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nV<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(R(*FallbackTemplate("plain"), ctx), "S\nU\nA\nV");
  EXPECT_THAT(FallbackTemplateNames(),
              ::testing::ElementsAre("chatml", "mistral", "llama3", "plain"));
  EXPECT_THAT(FallbackTemplate("nope").status(), StatusIs(absl::StatusCode::kNotFound));
}

TEST(ChatTemplateTest, TemplateFromTokenizerConfig) {
  EXPECT_THAT(ChatTemplateFromTokenizerConfig({{"chat_template", "T"}}),
              common::testing::IsOkAndHolds("T"));
  const json listed = {
      {"chat_template",
       {{{"name", "default"}, {"template", "D"}}, {{"name", "tool_use"}, {"template", "U"}}}}};
  EXPECT_THAT(ChatTemplateFromTokenizerConfig(listed), common::testing::IsOkAndHolds("D"));
  EXPECT_THAT(ChatTemplateFromTokenizerConfig(listed, "tool_use"),
              common::testing::IsOkAndHolds("U"));
  EXPECT_THAT(ChatTemplateFromTokenizerConfig({{"eos_token", "x"}}).status(),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ChatTemplateFromTokenizerConfig({{"chat_template", 3}}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChatTemplateTest, RenderIsThreadSafeOnASharedTemplate) {
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Parse(std::string(*FallbackTemplate("chatml")), common::SystemClock::Get());
  ASSERT_OK(t.status());
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] {
      for (int k = 0; k < 200; ++k) {
        json ctx = {{"messages", {{{"role", "user"}, {"content", std::to_string(i)}}}}};
        if (t->Render(ctx).value_or("") ==
            "<|im_start|>user\n" + std::to_string(i) + "<|im_end|>\n") {
          ++ok;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 800);
}

}  // namespace
}  // namespace moe::chat_template
