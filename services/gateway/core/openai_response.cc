#include "services/gateway/core/openai_response.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace moe::gateway {
namespace {

using generation::FinishReason;
using generation::FinishReasonName;
using generation::Usage;
using Json = nlohmann::json;

const char* ObjectName(const ResponseMeta& meta, bool chunk) {
  if (meta.endpoint == Endpoint::kCompletions) return "text_completion";
  return chunk ? "chat.completion.chunk" : "chat.completion";
}

Json Bytes(const std::string& s) {
  Json out = Json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

Json LogprobsJson(const ResponseMeta& meta, const std::vector<RenderedLogprob>* logprobs) {
  if (logprobs == nullptr) return nullptr;
  if (meta.endpoint == Endpoint::kChatCompletions) {
    Json content = Json::array();
    for (const RenderedLogprob& lp : *logprobs) {
      Json top = Json::array();
      for (const auto& [token, logprob] : lp.top) {
        top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", Bytes(token)}});
      }
      content.push_back({{"token", lp.token},
                         {"logprob", lp.logprob},
                         {"bytes", Bytes(lp.token)},
                         {"top_logprobs", std::move(top)}});
    }
    return Json{{"content", std::move(content)}, {"refusal", nullptr}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(),
       offsets = Json::array();
  for (const RenderedLogprob& lp : *logprobs) {
    tokens.push_back(lp.token);
    token_logprobs.push_back(lp.logprob);
    Json alts = Json::object();
    for (const auto& [token, logprob] : lp.top) {
      if (!alts.contains(token)) alts[token] = logprob;
    }
    top.push_back(std::move(alts));
    offsets.push_back(lp.text_offset);
  }
  return Json{{"tokens", std::move(tokens)},
              {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", std::move(top)},
              {"text_offset", std::move(offsets)}};
}

Json FinishJson(FinishReason finish) {
  if (finish == FinishReason::kNone) return nullptr;
  return std::string(FinishReasonName(finish));
}

Json Envelope(const ResponseMeta& meta, bool chunk) {
  return Json{{"id", meta.id},
              {"object", ObjectName(meta, chunk)},
              {"created", meta.created},
              {"model", meta.model},
              {"system_fingerprint", nullptr}};
}

}  // namespace

Json UsageJson(const Usage& usage) {
  return Json{{"prompt_tokens", usage.prompt_tokens},
              {"completion_tokens", usage.completion_tokens},
              {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", usage.cached_prompt_tokens}}}};
}

std::string DumpJson(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string RenderResponse(const ResponseMeta& meta, const std::string& text, FinishReason finish,
                           const Usage& usage, const std::vector<RenderedLogprob>* logprobs) {
  Json choice = {{"index", 0}};
  if (meta.endpoint == Endpoint::kChatCompletions) {
    choice["message"] = {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = LogprobsJson(meta, logprobs);
  choice["finish_reason"] = FinishJson(finish);
  Json body = Envelope(meta, /*chunk=*/false);
  body["choices"] = Json::array({std::move(choice)});
  body["usage"] = UsageJson(usage);
  return DumpJson(body);
}

std::string RenderChunk(const ResponseMeta& meta, bool role, const std::string& text,
                        FinishReason finish, const std::vector<RenderedLogprob>* logprobs,
                        bool usage_null) {
  Json choice = {{"index", 0}};
  if (meta.endpoint == Endpoint::kChatCompletions) {
    Json delta = Json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = LogprobsJson(meta, logprobs);
  choice["finish_reason"] = FinishJson(finish);
  Json body = Envelope(meta, /*chunk=*/true);
  body["choices"] = Json::array({std::move(choice)});
  if (usage_null) body["usage"] = nullptr;
  return DumpJson(body);
}

std::string RenderToolResponse(const ResponseMeta& meta, const std::string& content,
                               const std::vector<ToolCall>& calls, const std::string& finish_reason,
                               const Usage& usage, const std::vector<RenderedLogprob>* logprobs) {
  Json message = {{"role", "assistant"},
                  {"content", content.empty() && !calls.empty() ? Json(nullptr) : Json(content)},
                  {"refusal", nullptr}};
  if (!calls.empty()) {
    Json list = Json::array();
    for (const ToolCall& c : calls) {
      list.push_back({{"id", c.id},
                      {"type", "function"},
                      {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    }
    message["tool_calls"] = std::move(list);
  }
  Json choice = {{"index", 0}, {"message", std::move(message)}};
  choice["logprobs"] = LogprobsJson(meta, logprobs);
  choice["finish_reason"] = finish_reason;
  Json body = Envelope(meta, /*chunk=*/false);
  body["choices"] = Json::array({std::move(choice)});
  body["usage"] = UsageJson(usage);
  return DumpJson(body);
}

std::string RenderToolCallChunk(const ResponseMeta& meta, const std::vector<ToolCallDelta>& deltas,
                                bool usage_null) {
  Json list = Json::array();
  for (const ToolCallDelta& d : deltas) {
    Json entry = {{"index", d.index}};
    Json function = {{"arguments", d.arguments}};
    if (!d.id.empty()) {
      entry["id"] = d.id;
      entry["type"] = "function";
      function["name"] = d.name;
    }
    entry["function"] = std::move(function);
    list.push_back(std::move(entry));
  }
  Json choice = {{"index", 0},
                 {"delta", {{"tool_calls", std::move(list)}}},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  Json body = Envelope(meta, /*chunk=*/true);
  body["choices"] = Json::array({std::move(choice)});
  if (usage_null) body["usage"] = nullptr;
  return DumpJson(body);
}

std::string RenderFinishChunk(const ResponseMeta& meta, const std::string& finish_reason,
                              const std::vector<RenderedLogprob>* logprobs, bool usage_null) {
  Json choice = {{"index", 0}, {"delta", Json::object()}};
  choice["logprobs"] = LogprobsJson(meta, logprobs);
  choice["finish_reason"] = finish_reason;
  Json body = Envelope(meta, /*chunk=*/true);
  body["choices"] = Json::array({std::move(choice)});
  if (usage_null) body["usage"] = nullptr;
  return DumpJson(body);
}

std::string RenderUsageChunk(const ResponseMeta& meta, const Usage& usage) {
  Json body = Envelope(meta, /*chunk=*/true);
  body["choices"] = Json::array();
  body["usage"] = UsageJson(usage);
  return DumpJson(body);
}

std::string SseEvent(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 8);
  out.append("data: ").append(json).append("\n\n");
  return out;
}

}  // namespace moe::gateway
