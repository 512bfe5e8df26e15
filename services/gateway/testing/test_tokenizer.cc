#include "services/gateway/testing/test_tokenizer.h"

#include <string>

#include "absl/strings/str_format.h"
#include "common/base/check.h"
#include "nlohmann/json.hpp"

namespace moe::gateway::testing {

std::unique_ptr<tokenizer::Tokenizer> MakeTestTokenizer() {
  using nlohmann::json;
  const std::string sp = "\xE2\x96\x81";
  json vocab = json::object();
  vocab["<unk>"] = 0;
  vocab["<s>"] = 1;
  vocab["</s>"] = 2;
  for (int b = 0; b < 256; ++b) vocab[absl::StrFormat("<0x%02X>", b)] = 3 + b;
  vocab[sp] = 259;
  json added = json::array();
  const char* names[] = {"<unk>", "<s>", "</s>"};
  for (int i = 0; i < 3; ++i) {
    added.push_back({{"id", i},
                     {"content", names[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  json tok = {
      {"version", "1.0"},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         json::array({{{"type", "Prepend"}, {"prepend", sp}},
                      {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", sp}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders",
         json::array({{{"type", "Replace"}, {"pattern", {{"String", sp}}}, {"content", " "}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}},
                      {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", json::array()}}},
  };
  json config = {{"bos_token", "<s>"},
                 {"eos_token", "</s>"},
                 {"add_bos_token", true},
                 {"chat_template",
                  "{{ bos_token }}{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n"
                  "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"}};
  auto t = tokenizer::Tokenizer::FromJson(tok.dump(), config.dump());
  MOE_CHECK_OK(t.status());
  return std::move(t).value();
}

}  // namespace moe::gateway::testing
