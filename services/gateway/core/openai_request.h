// Parsing and validation of OpenAI /v1/chat/completions and /v1/completions request bodies
// (plus vLLM's extras: top_k, min_p, repetition_penalty, ignore_eos, stop_token_ids,
// skip_special_tokens, include_stop_str_in_output, cache_salt, priority, chat_template_kwargs,
// add_generation_prompt, continue_final_message).
//
// Structured outputs and tools (chat): response_format (text, json_object, json_schema), vLLM's
// guided_json / guided_regex / guided_choice and structured_outputs (one source at most), tools
// (function tools), tool_choice (none, auto, required, a named function), parallel_tool_calls,
// assistant messages with tool_calls and tool messages. Whether a schema compiles is the
// gateway's check (grammar cache), not this parser's.
//
// Every rejection is an ApiError 400 whose `param` names the field (sizes past RequestLimits:
// code limit_exceeded, the message naming the option): malformed JSON, wrong types,
// values out of range, and parameters this gateway does not support yet (n > 1, the deprecated
// functions / function_call, guided_grammar, echo, suffix, best_of > 1), which are never silently
// ignored. Unknown fields are ignored, as vLLM does. The model name is checked by
// the caller (404 model_not_found), token ids against the vocabulary too.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/generation/constraint.h"
#include "common/generation/sampling_params.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/api_error.h"

namespace moe::gateway {

enum class Endpoint { kChatCompletions, kCompletions };

// OpenAI's tool_choice: "none", "auto", "required", or {"type": "function", "function":
// {"name": ...}} (kNamed).
enum class ToolChoiceMode { kNone, kAuto, kRequired, kNamed };
struct ToolChoice {
  ToolChoiceMode mode = ToolChoiceMode::kNone;
  std::string name;  // kNamed: the function
};

// One function tool, as the constraint needs it.
struct ToolFunction {
  std::string name;             // [a-zA-Z0-9_-]{1,64}, unique in the request
  std::string parameters_json;  // the parameters schema as sent (key order kept); "" if none
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string model;

  // Chat: the messages, validated (role strings; content a string, null, or text parts, which
  // are joined into one string here), ready for the chat template.
  nlohmann::json messages = nlohmann::json::array();
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::json chat_template_kwargs = nlohmann::json::object();

  // Completions: the prompt as text, or as token ids when prompt_is_ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;

  // max_completion_tokens or max_tokens as given, >= 1 when set. The gateway resolves it into
  // sampling.max_tokens (unset: what the context leaves, capped by default_max_tokens).
  std::optional<int32_t> max_tokens;
  // OpenAI defaults (temperature 1, top_p 1, ...); stop_token_ids, ignore_eos and logprobs
  // (-1 when `logprobs` is off, else top_logprobs / the completions' logprobs count) as parsed.
  // sampling.max_tokens is not parsed here (see max_tokens).
  generation::SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, non-empty each
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string user;
  std::string cache_salt;
  int32_t priority = 0;

  // Chat tools: `tools` as sent (validated), for the chat template's `tools` variable;
  // `tool_functions` the same functions in order; tool_choice defaults to auto with tools, none
  // without.
  nlohmann::json tools = nlohmann::json::array();
  std::vector<ToolFunction> tool_functions;
  ToolChoice tool_choice;
  bool parallel_tool_calls = true;
  // Structured output (response_format json_object / json_schema, guided_*, structured_outputs);
  // inactive when none. `constraint_param` names the field it came from, for error messages.
  generation::Constraint constraint;
  std::string constraint_param;
};

// Sizes a client controls, from the gateway's `limits` options (gateway_options.h). A request past
// one is refused with ApiError::LimitExceeded (400 limit_exceeded, `param` the field, the message
// naming the option).
struct RequestLimits {
  int max_stop_strings = 16;          // limits.max_stop_strings
  int max_stop_string_bytes = 256;    // limits.max_stop_string_bytes
  int max_stop_token_ids = 64;        // limits.max_stop_token_ids (the routers' own bound)
  int max_logit_bias_entries = 1024;  // limits.max_logit_bias_entries
  int max_messages = 4096;            // limits.max_messages
  int max_tools = 128;                // limits.max_tools
  int max_top_logprobs = 20;          // limits.max_top_logprobs (chat top_logprobs; completions
                                      // logprobs at most min(5, this))
};

// Parses `body` for `endpoint`. On failure returns false and fills `*error`.
bool ParseCompletionRequest(Endpoint endpoint, std::string_view body, const RequestLimits& limits,
                            CompletionRequest* out, ApiError* error);

}  // namespace moe::gateway
