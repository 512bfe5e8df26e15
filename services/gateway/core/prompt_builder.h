// Turns a parsed request into prompt token ids: chat messages through the model's chat template
// (tokenizer_config.json `chat_template`, else a named built-in fallback) with
// chat_template::RenderChat, then the tokenizer; completions' text through the tokenizer
// (special tokens such as BOS added as the tokenizer config says); completions' token ids as
// given.
//
// Thread-safety: immutable after Create(); Build() and RenderChat() may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/chat_template/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "services/gateway/core/openai_request.h"

namespace moe::gateway {

class PromptBuilder {
 public:
  // kInvalidArgument when the model's template does not parse or the fallback name is unknown.
  // `tokenizer` and `clock` (read by the template's strftime_now()) must outlive the builder.
  static absl::StatusOr<std::unique_ptr<PromptBuilder>> Create(
      const tokenizer::Tokenizer& tokenizer, const std::string& fallback_template,
      common::Clock& clock);

  // The chat prompt text. kInvalidArgument when the template rejects the messages
  // (raise_exception, e.g. roles not alternating).
  absl::StatusOr<std::string> RenderChat(const CompletionRequest& request) const;
  // Prompt token ids of `request` (chat or completions).
  absl::StatusOr<std::vector<int32_t>> Build(const CompletionRequest& request) const;

  // "model" (from tokenizer_config.json) or "fallback:<name>".
  const std::string& template_source() const { return template_source_; }

 private:
  PromptBuilder(const tokenizer::Tokenizer& tokenizer, chat_template::ChatTemplate chat_template,
                std::string source);

  const tokenizer::Tokenizer& tokenizer_;
  const chat_template::ChatTemplate chat_template_;
  const std::string template_source_;
};

}  // namespace moe::gateway
