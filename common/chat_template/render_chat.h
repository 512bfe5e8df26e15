// The one way this project turns a conversation into prompt text: the variables Hugging Face
// transformers' `apply_chat_template` gives a model's chat template (messages, extra context
// such as tools or `enable_thinking`, add_generation_prompt, the tokenizer's bos/eos tokens),
// rendered by a parsed ChatTemplate. The gateway's PromptBuilder (/v1/chat/completions) and
// `moe generate --chat` both call RenderChat, so a prompt renders identically in both.
//
// The caller tokenizes the text without adding special tokens (the template writes BOS itself,
// as apply_chat_template(tokenize=True) does).
//
// Thread-safety: pure function; may run concurrently on one ChatTemplate.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/chat_template/chat_template.h"
#include "nlohmann/json.hpp"

namespace moe::chat_template {

// The tokenizer's special tokens a template may print (tokenizer_config.json bos_token /
// eos_token; "" when the model has none).
struct SpecialTokens {
  std::string bos_token;
  std::string eos_token;
};

struct ChatInput {
  // [{"role": "system" | "user" | "assistant" | "tool", "content": "..." | [parts] | null,
  //   "tool_calls": [...], ...}, ...], passed to the template as given.
  nlohmann::json messages = nlohmann::json::array();
  // More template variables, a JSON object: "tools", and chat_template_kwargs such as
  // {"enable_thinking": false}. The variables RenderChat sets (messages,
  // add_generation_prompt, bos_token, eos_token) take precedence over keys of the same name.
  nlohmann::json extra_context = nlohmann::json::object();
  // End with the opening of an assistant turn (the template's `add_generation_prompt`).
  bool add_generation_prompt = true;
  // Leave the final message open so that generation continues it (transformers'
  // continue_final_message): no generation prompt, and the text is cut right after that
  // message's content.
  bool continue_final_message = false;
};

// Renders `input` (a sink: its JSON moves into the template context) with `tmpl`;
// strftime_now() reads the clock and time zone `tmpl` was parsed
// with (ChatTemplateOptions). Errors: kInvalidArgument when extra_context is not an object or
// the template rejects the conversation (raise_exception, e.g. roles not alternating; type
// errors), kResourceExhausted when a ChatTemplateOptions limit is hit.
absl::StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, ChatInput&& input,
                                       const SpecialTokens& special_tokens);

}  // namespace moe::chat_template
