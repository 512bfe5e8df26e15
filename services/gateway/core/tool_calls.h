// Tool calling on the chat endpoint: the constraint that `tool_choice` "required" or a named
// function puts on the output, and the parser that turns the output text into
// message.tool_calls (and, streamed, into delta.tool_calls pieces in OpenAI's chunk shape).
//
// Three ways a request calls tools:
//   named     tool_choice {"type": "function", "function": {"name": F}}: the output is constrained
//             to F's `parameters` schema and is the call's arguments (vLLM does the same);
//   required  the output is constrained to a JSON array of one or more calls,
//             [{"name": <a tool's name>, "arguments": <that tool's parameters>}, ...] (one call
//             at most when parallel_tool_calls is false);
//   auto      unconstrained; the model's own tool-call format, as its chat template renders tools,
//             is recognised in the output: Mistral's `[TOOL_CALLS] [{"name", "arguments"}...]`,
//             Hermes / Qwen's `<tool_call>{"name", "arguments"}</tool_call>` blocks, Llama 3's
//             bare `{"name", "parameters"}` object (optionally after <|python_tag|>). Text that
//             does not parse as calls of declared tools stays content.
// Named and required calls stream incrementally (the id and name first, then the arguments as
// they are generated); auto calls are sent whole when the output ends (the text after the
// format's marker is held back until then; text before it streams as content).
//
// Thread-safety: ToolCallFormat helpers and ToolChoiceConstraint are pure; a ToolCallParser is
// thread-compatible (one response).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/generation/constraint.h"
#include "services/gateway/core/openai_request.h"
#include "services/gateway/core/openai_response.h"

namespace moe::gateway {

enum class ToolCallFormat { kNone, kMistral, kHermes, kLlama3 };

// "none", "mistral", "hermes", "llama3".
const char* ToolCallFormatName(ToolCallFormat format);
// "auto" -> DetectToolCallFormat(chat_template); kInvalidArgument for other unknown names.
absl::StatusOr<ToolCallFormat> ResolveToolCallFormat(std::string_view name,
                                                     std::string_view chat_template);
// The format a chat template renders tool calls in: [TOOL_CALLS] -> Mistral, <tool_call> ->
// Hermes, <|python_tag|> / ipython -> Llama 3; else kNone.
ToolCallFormat DetectToolCallFormat(std::string_view chat_template);

// The constraint of a named or required tool_choice (JSON Schema text; each function's $defs are
// renamed so that several functions' schemas live in one document); nullopt for none / auto.
std::optional<generation::Constraint> ToolChoiceConstraint(const CompletionRequest& request);

enum class ToolCallMode { kNamed, kRequired, kAuto };

class ToolCallParser {
 public:
  struct Output {
    std::string content;                // text to show as message content
    std::vector<ToolCallDelta> deltas;  // tool-call pieces (streaming)
  };

  // `functions`: the declared tool names (auto mode accepts only these); `named`: the function
  // of kNamed. Call ids are "call_" + 24 hex digits derived from `id_seed`.
  ToolCallParser(ToolCallMode mode, ToolCallFormat format, std::vector<std::string> functions,
                 std::string named, uint64_t id_seed);

  // More output text.
  Output Add(std::string_view text);
  // The output ended: whatever was held back.
  Output Finish();

  // Every call so far (complete after Finish()): what message.tool_calls holds.
  const std::vector<ToolCall>& calls() const { return calls_; }
  ToolCallMode mode() const { return mode_; }

 private:
  // kRequired: one character of the JSON array.
  void ScanRequired(char c, Output* out);
  void EmitArguments(std::string_view text, Output* out);
  std::string NewId();
  // kAuto: parses the held-back tool text; false when it is not calls of declared tools.
  bool ParseAuto(const std::string& text);
  bool AddParsedCall(const std::string& name, const std::string& arguments);
  bool Known(const std::string& name) const;

  const ToolCallMode mode_;
  const ToolCallFormat format_;
  const std::vector<std::string> functions_;
  const std::string named_;
  const uint64_t id_seed_;
  std::vector<ToolCall> calls_;

  // kRequired: a small JSON scanner over [{"name": "...", "arguments": ...}, ...].
  int depth_ = 0;
  bool in_string_ = false;
  bool escape_ = false;
  enum class Slot { kNone, kKey, kName, kArguments, kOther };
  Slot slot_ = Slot::kNone;   // what the current depth-2 string / value is
  bool expect_key_ = true;    // at depth 2: the next string is a key
  std::string key_;           // the key being read / just read
  std::string name_;          // the current element's name
  std::string pending_args_;  // arguments seen before the name (or whitespace held back)
  bool call_open_ = false;    // the current element's call was announced (id + name sent)
  std::string held_ws_;       // whitespace inside arguments, sent once more value follows

  // kAuto.
  std::string held_;       // possible start of the marker, not yet shown
  bool in_tools_ = false;  // the marker was seen (or the output starts a Llama 3 call)
  bool started_ = false;   // some non-whitespace output was seen (Llama 3 detection)
  std::string tool_text_;  // everything after the marker
  std::string marker_;     // the format's marker
};

}  // namespace moe::gateway
