#include "common/tokenizer/testing/sp_tokenizer_json.h"

#include "absl/strings/str_format.h"

namespace moe::tokenizer::testing {

using nlohmann::json;

json SentencePieceTokenizerJson(const std::vector<std::string>& pieces,
                                const std::vector<std::string>& merges) {
  const std::string sp = kSpacePiece;
  json vocab = json::object();
  const char* special[] = {"<unk>", "<s>", "</s>"};
  json added = json::array();
  for (int i = 0; i < 3; ++i) {
    vocab[special[i]] = i;
    added.push_back({{"id", i},
                     {"content", special[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  for (int b = 0; b < 256; ++b) vocab[absl::StrFormat("<0x%02X>", b)] = 3 + b;
  int next = 259;
  for (const std::string& p : pieces) vocab[p] = next++;
  return {
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
        {"merges", merges}}},
  };
}

json SentencePieceConfigJson(const std::string& chat_template) {
  return {{"bos_token", "<s>"},
          {"eos_token", "</s>"},
          {"add_bos_token", true},
          {"chat_template", chat_template}};
}

}  // namespace moe::tokenizer::testing
