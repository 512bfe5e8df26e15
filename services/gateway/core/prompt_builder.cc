#include "services/gateway/core/prompt_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/chat_template/render_chat.h"

namespace moe::gateway {

absl::StatusOr<std::unique_ptr<PromptBuilder>> PromptBuilder::Create(
    const tokenizer::Tokenizer& tokenizer, const std::string& fallback_template,
    common::Clock& clock) {
  std::string source = tokenizer.chat_template();
  std::string what = "model";
  if (source.empty()) {
    ASSIGN_OR_RETURN(std::string_view fallback, chat_template::FallbackTemplate(fallback_template));
    source = std::string(fallback);
    what = absl::StrCat("fallback:", fallback_template);
  }
  absl::StatusOr<chat_template::ChatTemplate> parsed =
      chat_template::ChatTemplate::Parse(source, clock);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template (", what, "): ", parsed.status().message()));
  }
  return std::unique_ptr<PromptBuilder>(
      new PromptBuilder(tokenizer, *std::move(parsed), std::move(what)));
}

PromptBuilder::PromptBuilder(const tokenizer::Tokenizer& tokenizer,
                             chat_template::ChatTemplate chat_template, std::string source)
    : tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      template_source_(std::move(source)) {}

absl::StatusOr<std::string> PromptBuilder::RenderChat(const CompletionRequest& request) const {
  nlohmann::json extra = request.chat_template_kwargs;
  // The template's `tools` variable, as transformers passes it (the request's own list wins over
  // a chat_template_kwargs entry).
  if (!request.tools.empty() && extra.is_object()) extra["tools"] = request.tools;
  return chat_template::RenderChat(chat_template_,
                                   {.messages = request.messages,
                                    .extra_context = std::move(extra),
                                    .add_generation_prompt = request.add_generation_prompt,
                                    .continue_final_message = request.continue_final_message},
                                   {tokenizer_.bos_token(), tokenizer_.eos_token()});
}

absl::StatusOr<std::vector<int32_t>> PromptBuilder::Build(const CompletionRequest& request) const {
  if (request.endpoint == Endpoint::kChatCompletions) {
    ASSIGN_OR_RETURN(std::string text, RenderChat(request));
    // The template writes BOS itself (HF apply_chat_template tokenizes without special tokens).
    return tokenizer_.Encode(text, /*add_special_tokens=*/false);
  }
  if (request.prompt_is_ids) return request.prompt_ids;
  return tokenizer_.Encode(request.prompt_text, /*add_special_tokens=*/true);
}

}  // namespace moe::gateway
