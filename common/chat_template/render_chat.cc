#include "common/chat_template/render_chat.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "common/base/status_macros.h"

namespace moe::chat_template {

absl::StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, ChatInput&& input,
                                       const SpecialTokens& special_tokens) {
  if (!input.extra_context.is_object()) {
    return absl::InvalidArgumentError("chat template extra context must be a JSON object");
  }
  // transformers cuts a continued final message after its content; remember the content before
  // the messages move into the context.
  std::string open_content;
  if (input.continue_final_message && input.messages.is_array() && !input.messages.empty()) {
    const nlohmann::json& last = input.messages.back();
    if (last.is_object() && last.contains("content") && last["content"].is_string()) {
      open_content = last["content"].get<std::string>();
    }
  }
  nlohmann::json context = std::move(input.extra_context);
  context["messages"] = std::move(input.messages);
  context["add_generation_prompt"] = input.add_generation_prompt && !input.continue_final_message;
  context["bos_token"] = special_tokens.bos_token;
  context["eos_token"] = special_tokens.eos_token;
  ASSIGN_OR_RETURN(std::string text, tmpl.Render(context));
  if (!open_content.empty()) {
    const size_t pos = text.rfind(open_content);
    if (pos != std::string::npos) text.resize(pos + open_content.size());
  }
  return text;
}

}  // namespace moe::chat_template
