// Chat templates: renders a model's `tokenizer_config.json` `chat_template` (a Jinja template)
// into the prompt text, as Hugging Face transformers' `apply_chat_template` does.
//
// The library (moe_chat_template, namespace moe::chat_template): this header (ChatTemplate,
// ChatTemplateFromTokenizerConfig, the built-in FallbackTemplate()s) and render_chat.h
// (RenderChat: the chat context of apply_chat_template, what callers use); the interpreter
// behind them in namespace jinja (value, lexer, parser, ast, eval, builtins, filters).
// It is checked against Hugging Face's own renderer (@huggingface/jinja) on the real templates
// of the models below (chat_template_oracle_test.cc). Not supported: template inheritance and
// loading (extends, block, include, import), `with`, autoescaping, and Jinja features no chat
// template uses; `{% generation %}` markers are accepted and ignored.
//
// The interpreter implements the Jinja subset that real chat templates use (Mixtral/Mistral,
// Qwen2, Qwen3 with its thinking switch, Llama 3/3.1/3.2, OLMo/OLMoE, ChatML, ...):
//   {{ }}, {% %}, {# #}, `-`/`+` whitespace control with trim_blocks and lstrip_blocks on (as
//   transformers sets them); if/elif/else, for (tuple targets, `if` filter, else, loop.*),
//   set (incl. namespace() and `ns.attr`), block set, macro, call, filter blocks, break/continue,
//   raw; operators ~ + - * / // % ** == != < <= > >= and/or/not in/not in, `x if c else y`,
//   slices; str/dict methods (strip(chars), split, startswith, endswith, replace, get, items,
//   ...); filters (trim, length, tojson, string, upper, lower, default, join, replace, first,
//   last, items, selectattr/rejectattr, map, select/reject, sort, unique, indent, ...); tests
//   (defined, none, string, mapping, iterable, equalto, ...); globals raise_exception,
//   namespace, range, strftime_now.
// Semantics follow Python Jinja2 (what transformers runs): `{{ none }}` prints "None", floats
// print as Python does, `set` inside a loop does not leak out of the iteration, `"x" + 1` is an
// error. Case mapping (upper/lower/title) is ASCII-only; str lengths count code points.
//
// Thread-safety: a parsed ChatTemplate is immutable; Render() may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "nlohmann/json.hpp"

namespace moe::chat_template {
namespace jinja {
class Value;
}  // namespace jinja

struct ChatTemplateOptions {
  // Upper bound of one rendered prompt, bytes; beyond it Render() fails (kResourceExhausted).
  size_t max_output_bytes = 16 << 20;
  // Statements, loop iterations, filter and function calls per render; bounds runaway
  // templates such as huge range() loops. Real chat templates need a few per message.
  int64_t max_steps = 2'000'000;
  // Nesting of macro calls (recursive macros).
  int max_call_depth = 64;
  // strftime_now() reads the template's clock (Parse) in this time zone (transformers uses the
  // local time of the process).
  absl::TimeZone time_zone = absl::LocalTimeZone();

  absl::Status Validate() const;
};

class ChatTemplate {
 public:
  // Parses a template. kInvalidArgument with "line L, column C" for syntax errors
  // (unterminated tags/strings/blocks, unknown tags, bad expressions). `clock` (what
  // strftime_now() reads) is borrowed and must outlive the template and its copies.
  static absl::StatusOr<ChatTemplate> Parse(std::string_view source, common::Clock& clock,
                                            const ChatTemplateOptions& options = {});

  // Renders with `context` (a JSON object) as the template's variables; typically
  // {"messages": [{"role": ..., "content": "..." | [parts], "tool_calls": [...]}, ...],
  //  "add_generation_prompt": bool, "bos_token": ..., "eos_token": ..., "tools": [...],
  //  "enable_thinking": bool, ...}. Unknown filters/tests, type errors and raise_exception()
  // return kInvalidArgument with line:column; limits return kResourceExhausted.
  absl::StatusOr<std::string> Render(const nlohmann::json& context) const;
  // Same, keeping the key order of JSON objects as parsed (what Python does: `tojson` of tool
  // schemas then prints keys in request order). Prefer this for request bodies.
  absl::StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  absl::StatusOr<std::string> RenderValue(const jinja::Value& context) const;
  std::shared_ptr<const Impl> impl_;
};

// Picks the template source from a tokenizer_config.json: `chat_template` is either a string
// or a list of {"name", "template"} (then `name`, falling back to "default"). kNotFound when
// the config has none (use FallbackTemplate()).
absl::StatusOr<std::string> ChatTemplateFromTokenizerConfig(const nlohmann::json& config,
                                                            std::string_view name = "default");

// Built-in templates for models that ship none: "chatml" (<|im_start|>role ... <|im_end|>),
// "mistral" ([INST] ... [/INST], system prepended to the first user turn), "llama3"
// (<|start_header_id|>role<|end_header_id|>), "plain" (contents joined by newlines).
// kNotFound for other names.
absl::StatusOr<std::string_view> FallbackTemplate(std::string_view name);
std::vector<std::string_view> FallbackTemplateNames();

}  // namespace moe::chat_template
