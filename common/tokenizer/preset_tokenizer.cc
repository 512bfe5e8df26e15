#include "common/tokenizer/preset_tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/tokenizer/preset_corpus.h"
#include "common/tokenizer/unicode.h"
#include "nlohmann/json.hpp"

namespace moe::tokenizer {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr char kSp[] = "\xE2\x96\x81";  // ▁
constexpr size_t kMaxSyntheticTokenBytes = 24;

// Splits UTF-8 into its characters.
std::vector<std::string> Chars(std::string_view s) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    NextCodePoint(s, &pos);
    out.emplace_back(s.substr(start, pos - start));
  }
  return out;
}

// Words of the corpus as SentencePiece sees them: each line gets "▁" prepended and spaces become
// "▁"; a word starts at each "▁" that follows another character.
std::map<std::string, int64_t> CorpusWords() {
  std::map<std::string, int64_t> words;
  for (absl::string_view line : absl::StrSplit(PresetCorpus(), '\n')) {
    if (line.empty()) continue;
    std::string norm = kSp;
    for (char c : line) {
      if (c == ' ') {
        norm += kSp;
      } else {
        norm.push_back(c);
      }
    }
    const std::string_view v = norm;
    size_t start = 0;
    for (size_t pos = v.find(kSp, 1); pos != std::string_view::npos; pos = v.find(kSp, pos + 1)) {
      if (v.compare(pos - 3, 3, kSp) != 0) {
        ++words[std::string(v.substr(start, pos - start))];
        start = pos;
      }
    }
    ++words[std::string(v.substr(start))];
  }
  return words;
}

struct Trainer {
  std::vector<std::string> tokens;  // id -> token
  absl::flat_hash_map<std::string, int32_t> ids;
  std::vector<std::pair<int32_t, int32_t>> merges;
  int64_t target;

  bool Full() const { return static_cast<int64_t>(tokens.size()) >= target; }
  int32_t Add(const std::string& t) {
    tokens.push_back(t);
    return ids[t] = static_cast<int32_t>(tokens.size() - 1);
  }
};

}  // namespace

const char* PresetChatTemplate() {
  // Mistral-7B-Instruct style, with an optional leading system message folded into the first
  // user turn, and Mistral's tool format: [AVAILABLE_TOOLS] before the last user turn, assistant
  // tool calls as [TOOL_CALLS] [...], tool results as [TOOL_RESULTS] {...} [/TOOL_RESULTS].
  // Conversations without tools render exactly as the plain Mistral template does.
  return "{%- if messages[0]['role'] == 'system' %}"
         "{%- set system_message = messages[0]['content'] %}"
         "{%- set loop_messages = messages[1:] %}"
         "{%- else %}{%- set loop_messages = messages %}{%- endif %}"
         "{%- set ns = namespace(index=0, last_user=-1) %}"
         "{%- for message in loop_messages %}"
         "{%- if message['role'] == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}"
         "{%- endfor %}"
         "{{- bos_token }}"
         "{%- for message in loop_messages %}"
         "{%- set is_call = message['role'] == 'assistant' and message['tool_calls'] is defined "
         "and message['tool_calls'] %}"
         "{%- if message['role'] != 'tool' and not is_call %}"
         "{%- if (message['role'] == 'user') != (ns.index % 2 == 0) %}"
         "{{- raise_exception('After the optional system message, conversation roles must "
         "alternate user/assistant/user/assistant/...') }}"
         "{%- endif %}"
         "{%- set ns.index = ns.index + 1 %}"
         "{%- endif %}"
         "{%- if message['role'] == 'user' %}"
         "{%- if tools is defined and tools and loop.index0 == ns.last_user %}"
         "{{- '[AVAILABLE_TOOLS] ' + (tools | tojson) + ' [/AVAILABLE_TOOLS]' }}"
         "{%- endif %}"
         "{%- if loop.first and system_message is defined %}"
         "{{- '[INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}"
         "{%- else %}{{- '[INST] ' + message['content'] + ' [/INST]' }}{%- endif %}"
         "{%- elif is_call %}"
         "{{- ' [TOOL_CALLS] [' }}"
         "{%- for call in message['tool_calls'] %}"
         "{%- if not loop.first %}{{- ', ' }}{%- endif %}"
         "{{- {'name': call['function']['name'], 'arguments': call['function']['arguments']}"
         " | tojson }}"
         "{%- endfor %}"
         "{{- ']' + eos_token }}"
         "{%- elif message['role'] == 'assistant' %}"
         "{{- ' ' + message['content'] + eos_token }}"
         "{%- elif message['role'] == 'tool' %}"
         "{{- '[TOOL_RESULTS] ' + ({'call_id': message['tool_call_id'], 'content': "
         "message['content']} | tojson) + ' [/TOOL_RESULTS]' }}"
         "{%- else %}"
         "{{- raise_exception('Only user, assistant and tool roles are supported, with the "
         "exception of an initial optional system message!') }}"
         "{%- endif %}"
         "{%- endfor %}";
}

absl::StatusOr<PresetTokenizerFiles> BuildPresetTokenizer(int64_t vocab_size,
                                                          const std::string& arch,
                                                          int64_t model_max_length) {
  static const std::set<std::string> kArchs = {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe"};
  if (!kArchs.contains(arch)) {
    return absl::InvalidArgumentError(absl::StrCat("preset tokenizer: unknown arch '", arch, "'"));
  }
  if (vocab_size < kMinPresetVocab || vocab_size > (1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat("preset tokenizer: vocab_size ", vocab_size,
                                                   " is outside [", kMinPresetVocab, ", 2^20]"));
  }
  Trainer tr;
  tr.target = vocab_size;
  for (const char* s : {"<unk>", "<s>", "</s>"}) tr.Add(s);
  for (int b = 0; b < 256; ++b) tr.Add(absl::StrFormat("<0x%02X>", b));

  // Alphabet: characters occurring at least twice, most frequent first (ties by text), capped so
  // that at least two thirds of the remaining slots go to merges.
  const std::map<std::string, int64_t> words = CorpusWords();
  std::map<std::string, int64_t> char_counts;
  for (const auto& [w, n] : words)
    for (const auto& c : Chars(w)) char_counts[c] += n;
  std::vector<std::pair<std::string, int64_t>> alphabet(char_counts.begin(), char_counts.end());
  std::stable_sort(alphabet.begin(), alphabet.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  const size_t cap = static_cast<size_t>((vocab_size - 259) / 3);
  for (const auto& [c, n] : alphabet) {
    if (tr.tokens.size() - 259 >= cap || n < 2) break;
    tr.Add(c);
  }

  // Word types as symbol-id sequences (characters outside the alphabet: -1, never merged).
  struct Word {
    std::vector<int32_t> syms;
    int64_t count;
  };
  std::vector<Word> ws;
  for (const auto& [w, n] : words) {
    Word word{{}, n};
    for (const auto& c : Chars(w)) {
      auto it = tr.ids.find(c);
      word.syms.push_back(it == tr.ids.end() ? -1 : it->second);
    }
    ws.push_back(std::move(word));
  }

  // Corpus merges: the most frequent adjacent pair, ties by (left, right) text, until every corpus
  // word is a single token.
  while (!tr.Full()) {
    absl::flat_hash_map<uint64_t, int64_t> counts;
    for (const auto& w : ws) {
      if (w.syms.size() < 2) continue;
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        if (w.syms[i] < 0 || w.syms[i + 1] < 0) continue;
        counts[(static_cast<uint64_t>(w.syms[i]) << 32) | static_cast<uint32_t>(w.syms[i + 1])] +=
            w.count;
      }
    }
    int64_t best_count = 0;
    int32_t best_a = -1, best_b = -1;
    for (const auto& [key, n] : counts) {
      const auto a = static_cast<int32_t>(key >> 32), b = static_cast<int32_t>(key & 0xFFFFFFFF);
      if (n > best_count ||
          (n == best_count && best_a >= 0 &&
           std::tie(tr.tokens[a], tr.tokens[b]) < std::tie(tr.tokens[best_a], tr.tokens[best_b]))) {
        best_count = n;
        best_a = a;
        best_b = b;
      }
    }
    if (best_a < 0) break;
    const std::string merged = tr.tokens[best_a] + tr.tokens[best_b];
    auto existing = tr.ids.find(merged);
    const int32_t id = existing != tr.ids.end() ? existing->second : tr.Add(merged);
    tr.merges.emplace_back(best_a, best_b);
    for (auto& w : ws) {
      bool has_pair = false;
      for (size_t i = 0; i + 1 < w.syms.size() && !has_pair; ++i) {
        has_pair = w.syms[i] == best_a && w.syms[i + 1] == best_b;
      }
      if (!has_pair) continue;
      std::vector<int32_t> out;
      out.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == best_a && w.syms[i + 1] == best_b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(out);
    }
  }

  // Synthetic merges: pairs (a, b) of the tokens so far in diagonal order, b not starting with ▁
  // (so no token has ▁ after another character), a + b new and short.
  const std::vector<int32_t> pool = [&] {
    std::vector<int32_t> p;
    for (int32_t id = 259; id < static_cast<int32_t>(tr.tokens.size()); ++id) p.push_back(id);
    return p;
  }();
  const size_t n = pool.size();
  for (size_t s = 0; !tr.Full() && s + 1 < 2 * n; ++s) {
    for (size_t i = s >= n ? s - n + 1 : 0; i <= std::min(s, n - 1) && !tr.Full(); ++i) {
      const int32_t a = pool[i], b = pool[s - i];
      const std::string& tb = tr.tokens[b];
      if (tb.compare(0, 3, kSp) == 0) continue;
      std::string merged = tr.tokens[a] + tb;
      if (merged.size() > kMaxSyntheticTokenBytes || tr.ids.contains(merged)) continue;
      tr.Add(merged);
      tr.merges.emplace_back(a, b);
    }
  }
  if (!tr.Full()) {
    return absl::InternalError(absl::StrCat("preset tokenizer: could only build ", tr.tokens.size(),
                                            " of ", vocab_size, " tokens"));
  }

  // tokenizer.json, laid out as HF writes it.
  ordered_json added = ordered_json::array();
  for (int id = 0; id < 3; ++id) {
    added.push_back({{"id", id},
                     {"content", tr.tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  // The vocabulary is spliced in as text: nlohmann's ordered_json inserts in linear time.
  constexpr char kVocabPlaceholder[] = "@@VOCAB@@";
  std::string vocab_text = "{";
  for (size_t id = 0; id < tr.tokens.size(); ++id) {
    absl::StrAppend(&vocab_text, id == 0 ? "\n" : ",\n", "      ", json(tr.tokens[id]).dump(), ": ",
                    id);
  }
  vocab_text += "\n    }";
  ordered_json merges = ordered_json::array();
  for (const auto& [a, b] : tr.merges) merges.push_back(tr.tokens[a] + " " + tr.tokens[b]);
  ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       {{"type", "Sequence"},
        {"normalizers",
         ordered_json::array(
             {{{"type", "Prepend"}, {"prepend", kSp}},
              {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSp}}})}}},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", ordered_json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                        {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", ordered_json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                      {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                      {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                                      {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens",
         {{"<s>",
           {{"id", "<s>"},
            {"ids", ordered_json::array({1})},
            {"tokens", ordered_json::array({"<s>"})}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", ordered_json::array(
                         {{{"type", "Replace"}, {"pattern", {{"String", kSp}}}, {"content", " "}},
                          {{"type", "ByteFallback"}},
                          {{"type", "Fuse"}},
                          {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"ignore_merges", false},
        {"vocab", kVocabPlaceholder},
        {"merges", merges}}},
  };
  ordered_json added_decoder = ordered_json::object();
  for (int id = 0; id < 3; ++id) {
    added_decoder[std::to_string(id)] = {{"content", tr.tokens[id]}, {"lstrip", false},
                                         {"normalized", false},      {"rstrip", false},
                                         {"single_word", false},     {"special", true}};
  }
  ordered_json config = {
      {"add_bos_token", true},
      {"add_eos_token", false},
      {"added_tokens_decoder", added_decoder},
      {"additional_special_tokens", ordered_json::array()},
      {"bos_token", "<s>"},
      {"chat_template", PresetChatTemplate()},
      {"clean_up_tokenization_spaces", false},
      {"eos_token", "</s>"},
      {"legacy", true},
      {"model_max_length", model_max_length},
      {"pad_token", nullptr},
      {"sp_model_kwargs", ordered_json::object()},
      {"spaces_between_special_tokens", false},
      {"tokenizer_class", "LlamaTokenizer"},
      {"unk_token", "<unk>"},
      {"use_default_system_prompt", false},
  };
  std::string tok_text = tok.dump(2, ' ', false);
  const std::string quoted_placeholder = absl::StrCat("\"", kVocabPlaceholder, "\"");
  tok_text.replace(tok_text.find(quoted_placeholder), quoted_placeholder.size(), vocab_text);
  return PresetTokenizerFiles{std::move(tok_text), config.dump(2, ' ', false) + "\n"};
}

absl::Status WritePresetTokenizer(const std::string& out_dir, int64_t vocab_size,
                                  const std::string& arch, int64_t model_max_length) {
  auto files = BuildPresetTokenizer(vocab_size, arch, model_max_length);
  if (!files.ok()) return files.status();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  for (const auto& [name, text] :
       {std::pair<const char*, const std::string*>{"tokenizer.json", &files->tokenizer_json},
        {"tokenizer_config.json", &files->tokenizer_config_json}}) {
    const std::string path = absl::StrCat(out_dir, "/", name);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << *text;
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace moe::tokenizer
