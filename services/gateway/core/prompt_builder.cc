#include "services/gateway/core/prompt_builder.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

#ifdef MOE_GATEWAY_HAVE_CHAT_TEMPLATE
#include "services/gateway/core/chat_template.h"
#endif

namespace moe::gateway {

#ifdef MOE_GATEWAY_HAVE_CHAT_TEMPLATE
struct PromptBuilder::Impl {
  ChatTemplate chat_template;
};

absl::StatusOr<std::unique_ptr<PromptBuilder>> PromptBuilder::Create(
    const tokenizer::Tokenizer& tokenizer, const std::string& fallback_template) {
  std::string source = tokenizer.chat_template();
  std::string what = "model";
  if (source.empty()) {
    ASSIGN_OR_RETURN(std::string_view fallback, FallbackTemplate(fallback_template));
    source = std::string(fallback);
    what = absl::StrCat("fallback:", fallback_template);
  }
  absl::StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(source);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("chat template (", what, "): ", parsed.status().message()));
  }
  auto impl = std::make_unique<Impl>(Impl{std::move(*parsed)});
  return std::unique_ptr<PromptBuilder>(new PromptBuilder(tokenizer, std::move(impl), what));
}

absl::StatusOr<std::string> PromptBuilder::RenderChat(const CompletionRequest& request) const {
  nlohmann::json context = request.chat_template_kwargs;
  context["messages"] = request.messages;
  context["add_generation_prompt"] =
      request.add_generation_prompt && !request.continue_final_message;
  context["bos_token"] = tokenizer_.bos_token();
  context["eos_token"] = tokenizer_.eos_token();
  ASSIGN_OR_RETURN(std::string text, impl_->chat_template.Render(context));
  if (request.continue_final_message && !request.messages.empty()) {
    // Leave the final message open, as transformers does: cut after its content.
    const std::string last = request.messages.back().value("content", "");
    const size_t pos = last.empty() ? std::string::npos : text.rfind(last);
    if (pos != std::string::npos) text.resize(pos + last.size());
  }
  return text;
}
#else
// Until the Jinja interpreter is in the build: ChatML, the most common format.
struct PromptBuilder::Impl {};

absl::StatusOr<std::unique_ptr<PromptBuilder>> PromptBuilder::Create(
    const tokenizer::Tokenizer& tokenizer, const std::string& fallback_template) {
  return std::unique_ptr<PromptBuilder>(
      new PromptBuilder(tokenizer, std::make_unique<Impl>(), "fallback:chatml"));
}

absl::StatusOr<std::string> PromptBuilder::RenderChat(const CompletionRequest& request) const {
  std::string text;
  for (const nlohmann::json& m : request.messages) {
    absl::StrAppend(&text, "<|im_start|>", m.value("role", ""), "\n", m.value("content", ""),
                    "<|im_end|>\n");
  }
  if (request.add_generation_prompt) absl::StrAppend(&text, "<|im_start|>assistant\n");
  return text;
}
#endif

PromptBuilder::PromptBuilder(const tokenizer::Tokenizer& tokenizer, std::unique_ptr<Impl> impl,
                             std::string source)
    : tokenizer_(tokenizer), impl_(std::move(impl)), template_source_(std::move(source)) {}

PromptBuilder::~PromptBuilder() = default;

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
