// Arbitrary chat templates and messages into the Jinja parser and renderer (RenderChat). The input
// is "<template>\0<messages JSON>"; without a NUL the whole input is the template and a fixed
// conversation is rendered. Render limits (ChatTemplateOptions) keep runaway loops bounded.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/base/clock.h"
#include "common/chat_template/chat_template.h"
#include "common/chat_template/render_chat.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moe::chat_template;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view source = in.substr(0, nul);
  auto tmpl = ChatTemplate::Parse(source, moe::common::SystemClock::Get());
  if (!tmpl.ok()) return 0;
  ChatInput input;
  if (nul != std::string_view::npos) {
    input.messages = nlohmann::json::parse(in.substr(nul + 1), nullptr, /*allow_exceptions=*/false);
    if (input.messages.is_discarded()) return 0;
  } else {
    input.messages = nlohmann::json::parse(
        R"([{"role":"system","content":"be brief"},{"role":"user","content":"hi"},)"
        R"({"role":"assistant","content":"hello","tool_calls":[{"type":"function",)"
        R"("function":{"name":"f","arguments":{"a":1}}}]},{"role":"user","content":"again"}])");
  }
  (void)RenderChat(*tmpl, std::move(input), SpecialTokens{"<s>", "</s>"});
  return 0;
}
