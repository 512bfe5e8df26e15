#include "common/chat_template/chat_template.h"

#include <utility>

#include "common/base/status_macros.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/eval.h"
#include "common/chat_template/lexer.h"
#include "common/chat_template/parser.h"

namespace moe::chat_template {

struct ChatTemplate::Impl {
  explicit Impl(common::Clock& c) : clock(c) {}
  std::string source;
  jinja::StmtList program;
  ChatTemplateOptions options;
  common::Clock& clock;
};

absl::Status ChatTemplateOptions::Validate() const {
  if (max_output_bytes == 0) return absl::InvalidArgumentError("max_output_bytes must be > 0");
  if (max_steps <= 0) return absl::InvalidArgumentError("max_steps must be > 0");
  if (max_call_depth <= 0) return absl::InvalidArgumentError("max_call_depth must be > 0");
  return absl::OkStatus();
}

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source, common::Clock& clock,
                                                 const ChatTemplateOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(std::vector<jinja::Token> tokens, jinja::Tokenize(source));
  auto impl = std::make_shared<Impl>(clock);
  impl->source = std::string(source);
  ASSIGN_OR_RETURN(impl->program, jinja::Parse(tokens));
  impl->options = options;
  return ChatTemplate(std::move(impl));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::json& context) const {
  if (!context.is_object() && !context.is_null()) {
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  }
  return RenderValue(jinja::Value::FromJson(context));
}

absl::StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object() && !context.is_null()) {
    return absl::InvalidArgumentError("chat template context must be a JSON object");
  }
  return RenderValue(jinja::Value::FromJson(context));
}

absl::StatusOr<std::string> ChatTemplate::RenderValue(const jinja::Value& context) const {
  const jinja::ValueDict empty;
  const jinja::ValueDict& vars = context.is_dict() ? context.as_dict() : empty;
  const ChatTemplateOptions& o = impl_->options;
  jinja::Interpreter interp({.max_output_bytes = o.max_output_bytes,
                             .max_steps = o.max_steps,
                             .max_call_depth = o.max_call_depth},
                            impl_->clock, o.time_zone);
  return interp.Render(impl_->program, vars);
}

const std::string& ChatTemplate::source() const { return impl_->source; }

absl::StatusOr<std::string> ChatTemplateFromTokenizerConfig(const nlohmann::json& config,
                                                            std::string_view name) {
  if (!config.is_object() || !config.contains("chat_template") ||
      config["chat_template"].is_null()) {
    return absl::NotFoundError("tokenizer config has no chat_template");
  }
  const nlohmann::json& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (!t.is_array()) return absl::InvalidArgumentError("chat_template must be a string or a list");
  const nlohmann::json* fallback = nullptr;
  for (const auto& entry : t) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
        !entry["name"].is_string() || !entry["template"].is_string()) {
      return absl::InvalidArgumentError("chat_template list entries need name and template");
    }
    if (entry["name"] == name) return entry["template"].get<std::string>();
    if (entry["name"] == "default") fallback = &entry;
  }
  if (fallback != nullptr) return (*fallback)["template"].get<std::string>();
  return absl::NotFoundError(
      jinja::Cat("tokenizer config has no chat template named '", name, "' and no default"));
}

namespace {

struct Fallback {
  std::string_view name;
  std::string_view source;
};

// Written for this project (not copied from any model): the common prompt formats.
constexpr Fallback kFallbacks[] = {
    {"chatml",
     "{%- for message in messages -%}\n"
     "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n"},
    {"mistral",
     "{%- set ns = namespace(system='') -%}\n"
     "{{- bos_token -}}\n"
     "{%- for message in messages -%}\n"
     "{%- if message['role'] == 'system' -%}\n"
     "{%- set ns.system = message['content'] -%}\n"
     "{%- elif message['role'] == 'user' -%}\n"
     "{%- if ns.system -%}\n"
     "{{- '[INST] ' + ns.system + '\\n\\n' + message['content'] + ' [/INST]' -}}\n"
     "{%- set ns.system = '' -%}\n"
     "{%- else -%}{{- '[INST] ' + message['content'] + ' [/INST]' -}}{%- endif -%}\n"
     "{%- elif message['role'] == 'assistant' -%}\n"
     "{{- message['content'] + eos_token -}}\n"
     "{%- endif -%}\n"
     "{%- endfor -%}\n"},
    {"llama3",
     "{{- bos_token -}}\n"
     "{%- for message in messages -%}\n"
     "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
     "message['content'] | trim + '<|eot_id|>' -}}\n"
     "{%- endfor -%}\n"
     "{%- if add_generation_prompt -%}"
     "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}\n"},
    {"plain",
     "{%- for message in messages -%}\n"
     "{{- message['content'] -}}{%- if not loop.last -%}{{- '\\n' -}}{%- endif -%}\n"
     "{%- endfor -%}\n"},
};

}  // namespace

absl::StatusOr<std::string_view> FallbackTemplate(std::string_view name) {
  for (const Fallback& f : kFallbacks) {
    if (f.name == name) return f.source;
  }
  return absl::NotFoundError(jinja::Cat("no fallback chat template named '", name, "'"));
}

std::vector<std::string_view> FallbackTemplateNames() {
  std::vector<std::string_view> names;
  for (const Fallback& f : kFallbacks) names.push_back(f.name);
  return names;
}

}  // namespace moe::chat_template
