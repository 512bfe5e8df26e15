// Rendering of OpenAI response bodies and Server-Sent-Event chunks, in OpenAI's exact shapes:
//   chat:        {"id":"chatcmpl-..","object":"chat.completion","created":..,"model":..,
//                 "choices":[{"index":0,"message":{"role":"assistant","content":".."},
//                             "logprobs":null|{"content":[..]},"finish_reason":"stop"}],
//                 "usage":{"prompt_tokens":..,"completion_tokens":..,"total_tokens":..,
//                          "prompt_tokens_details":{"cached_tokens":..}}}
//   chat chunk:  "object":"chat.completion.chunk", choices[0].delta {"role"?, "content"?}
//   completions: "object":"text_completion", choices[0].text, logprobs {tokens, token_logprobs,
//                 top_logprobs, text_offset}; stream chunks have the same object name.
// Stream usage (stream_options.include_usage): "usage": null on every chunk, then one last chunk
// with "choices": [] and the usage.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/generation/finish_reason.h"
#include "common/generation/usage.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/openai_request.h"

namespace moe::gateway {

struct ResponseMeta {
  Endpoint endpoint = Endpoint::kChatCompletions;
  std::string id;  // "chatcmpl-..." / "cmpl-..."
  int64_t created = 0;
  std::string model;
};

// One generated token as shown in logprobs.
struct RenderedLogprob {
  std::string token;  // the token's text
  float logprob = 0;
  std::vector<std::pair<std::string, float>> top;  // alternatives, most likely first
  int32_t text_offset = 0;                         // completions: offset in the output text
};

// A function call of the assistant: an entry of message.tool_calls.
struct ToolCall {
  std::string id;         // "call_..."
  std::string name;       // the function
  std::string arguments;  // JSON text, as generated
};

// One piece of a streamed tool call (an entry of delta.tool_calls): the first piece of a call
// carries its id and name, the later ones more of its arguments.
struct ToolCallDelta {
  int32_t index = 0;
  std::string id;    // first piece only
  std::string name;  // first piece only
  std::string arguments;
};

nlohmann::json UsageJson(const generation::Usage& usage);

// The complete (non-stream) response body. `finish_reason` is generation::FinishReasonName's
// string. `logprobs` null when not requested.
std::string RenderResponse(const ResponseMeta& meta, const std::string& text,
                           generation::FinishReason finish, const generation::Usage& usage,
                           const std::vector<RenderedLogprob>* logprobs);

// One stream chunk's JSON. `role`: chat's first chunk carries {"role":"assistant"}.
// `finish` kNone: finish_reason null. `logprobs` null when not requested.
// `usage_null`: include "usage": null (stream_options.include_usage).
std::string RenderChunk(const ResponseMeta& meta, bool role, const std::string& text,
                        generation::FinishReason finish,
                        const std::vector<RenderedLogprob>* logprobs, bool usage_null);
// Chat with tools: the response whose message has `tool_calls` (content null when `content` is
// empty and there are calls) and the given finish_reason string ("tool_calls", "stop", "length").
std::string RenderToolResponse(const ResponseMeta& meta, const std::string& content,
                               const std::vector<ToolCall>& calls, const std::string& finish_reason,
                               const generation::Usage& usage,
                               const std::vector<RenderedLogprob>* logprobs);
// A chunk whose delta holds `deltas` as delta.tool_calls.
std::string RenderToolCallChunk(const ResponseMeta& meta, const std::vector<ToolCallDelta>& deltas,
                                bool usage_null);
// The last content chunk: an empty delta with finish_reason given as a string ("tool_calls").
std::string RenderFinishChunk(const ResponseMeta& meta, const std::string& finish_reason,
                              const std::vector<RenderedLogprob>* logprobs, bool usage_null);
// The final usage chunk ("choices": []).
std::string RenderUsageChunk(const ResponseMeta& meta, const generation::Usage& usage);

// "data: <json>\n\n".
std::string SseEvent(std::string_view json);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

// JSON text that never fails on invalid UTF-8 (replaced by U+FFFD).
std::string DumpJson(const nlohmann::json& j);

}  // namespace moe::gateway
