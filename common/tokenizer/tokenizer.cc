#include "common/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/file.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/unicode.h"

namespace moe::tokenizer {
namespace {

using nlohmann::json;

constexpr char kTokJson[] = "tokenizer.json";
constexpr char kConfigJson[] = "tokenizer_config.json";
constexpr char kGenConfigJson[] = "generation_config.json";
constexpr char kMetaspace[] = "\xE2\x96\x81";  // U+2581

absl::Status Err(std::string_view file, std::string_view field, std::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(file), ": ", std::string(field), ": ", std::string(what)));
}

absl::StatusOr<json> ParseJson(std::string_view text, std::string_view file) {
  json j = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    return absl::InvalidArgumentError(absl::StrCat(std::string(file), ": not valid JSON"));
  if (!j.is_object())
    return absl::InvalidArgumentError(absl::StrCat(std::string(file), ": not a JSON object"));
  return j;
}

absl::StatusOr<std::string> ReadFile(const std::filesystem::path& path) {
  return common::ReadFile(path.string());
}

bool GetBoolOr(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}

// A tokenizer_config token field: a string, {"content": string}, or null/absent ("").
absl::StatusOr<std::string> ConfigToken(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return (*it)["content"].get<std::string>();
  }
  return Err(kConfigJson, key, "expected a string or {\"content\": string}");
}

// Adds the ids of a TemplateProcessing "single" template (or Bert/Roberta cls/sep) to
// prefix/suffix.
absl::Status ParsePostProcessor(const json& j, const std::string& where,
                                const std::function<int32_t(const std::string&)>& token_id,
                                std::vector<int32_t>* prefix, std::vector<int32_t>* suffix,
                                bool* has_template) {
  if (j.is_null()) return absl::OkStatus();
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return Err(kTokJson, where, "missing string field 'type'");
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return absl::OkStatus();
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) return Err(kTokJson, where, "missing array 'processors'");
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(ParsePostProcessor((*it)[i], absl::StrCat(where, ".processors[", i, "]"),
                                         token_id, prefix, suffix, has_template));
    }
    return absl::OkStatus();
  }
  if (type == "TemplateProcessing") {
    *has_template = true;
    auto single = j.find("single");
    if (single == j.end() || !single->is_array())
      return Err(kTokJson, where, "missing array 'single'");
    const json* specials = j.contains("special_tokens") ? &j["special_tokens"] : nullptr;
    bool after = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const json& item = (*single)[i];
      const std::string field = absl::StrCat(where, ".single[", i, "]");
      if (item.contains("Sequence")) {
        after = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return Err(kTokJson, field,
                   "expected {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
      }
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      std::vector<int32_t> ids;
      if (specials != nullptr && specials->contains(name) && (*specials)[name].contains("ids") &&
          (*specials)[name]["ids"].is_array()) {
        for (const auto& v : (*specials)[name]["ids"]) {
          if (!v.is_number_integer())
            return Err(kTokJson, field, "special token ids must be integers");
          ids.push_back(v.get<int32_t>());
        }
      } else {
        const int32_t id = token_id(name);
        if (id < 0) return Err(kTokJson, field, absl::StrCat("unknown special token '", name, "'"));
        ids.push_back(id);
      }
      auto* dst = after ? suffix : prefix;
      dst->insert(dst->end(), ids.begin(), ids.end());
    }
    return absl::OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    *has_template = true;
    for (const char* key : {"cls", "sep"}) {
      auto it = j.find(key);
      if (it == j.end() || !it->is_array() || it->size() != 2 || !(*it)[1].is_number_integer()) {
        return Err(kTokJson, absl::StrCat(where, ".", key), "expected [token, id]");
      }
      (std::string(key) == "cls" ? prefix : suffix)->push_back((*it)[1].get<int32_t>());
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat(kTokJson, ": ", where, ": post_processor type '", type, "' is not supported"));
}

std::string CleanUpTokenization(std::string s) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) s = absl::StrReplaceAll(s, {{from, to}});
  return s;
}

}  // namespace

void Tokenizer::Trie::Insert(std::string_view s, int32_t token) {
  int32_t node = 0;
  for (char c : s) {
    const auto b = static_cast<unsigned char>(c);
    auto it = nodes[node].next.find(b);
    if (it == nodes[node].next.end()) {
      nodes.emplace_back();
      const auto child = static_cast<int32_t>(nodes.size() - 1);
      nodes[node].next.emplace(b, child);
      node = child;
    } else {
      node = it->second;
    }
  }
  nodes[node].token = token;
}

std::vector<Tokenizer::Trie::Piece> Tokenizer::Trie::Split(std::string_view text) const {
  std::vector<Piece> out;
  const Node& root = nodes[0];
  size_t start = 0, i = 0;
  while (i < text.size()) {
    int32_t node = 0, match = -1;
    size_t match_end = 0;
    for (size_t j = i; j < text.size(); ++j) {
      auto it = nodes[node].next.find(static_cast<unsigned char>(text[j]));
      if (it == nodes[node].next.end()) break;
      node = it->second;
      if (nodes[node].token >= 0) {
        match = nodes[node].token;
        match_end = j + 1;
      }
    }
    if (match >= 0) {
      if (i > start) out.push_back({start, i, -1});
      out.push_back({i, match_end, match});
      i = start = match_end;
    } else {
      ++i;
      // Skip ahead to the next byte that can start an added token.
      while (i < text.size() && !root.next.contains(static_cast<unsigned char>(text[i]))) ++i;
    }
  }
  if (start < text.size()) out.push_back({start, text.size(), -1});
  return out;
}

std::vector<Tokenizer::Section> Tokenizer::SplitAdded(const Trie& trie,
                                                      std::string_view text) const {
  std::vector<Section> sections;
  if (trie.nodes[0].next.empty()) {
    sections.push_back({text, -1});
    return sections;
  }
  for (const auto& p : trie.Split(text))
    sections.push_back({text.substr(p.start, p.end - p.start), p.token});
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].token < 0) continue;
    const AddedToken& t = added_tokens_[sections[i].token];
    if (t.lstrip && i > 0) sections[i - 1].text = TrimEnd(sections[i - 1].text);
    if (t.rstrip && i + 1 < sections.size()) sections[i + 1].text = TrimStart(sections[i + 1].text);
  }
  return sections;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path dir = path, json_path = path;
  if (fs::is_directory(path, ec)) {
    json_path = dir / kTokJson;
  } else {
    dir = fs::path(path).parent_path();
  }
  ASSIGN_OR_RETURN(std::string tok, ReadFile(json_path));
  std::string config, gen, tmpl;
  if (fs::exists(dir / kConfigJson, ec)) {
    ASSIGN_OR_RETURN(config, ReadFile(dir / kConfigJson));
  }
  if (fs::exists(dir / kGenConfigJson, ec)) {
    ASSIGN_OR_RETURN(gen, ReadFile(dir / kGenConfigJson));
  }
  if (fs::exists(dir / "chat_template.jinja", ec)) {
    ASSIGN_OR_RETURN(tmpl, ReadFile(dir / "chat_template.jinja"));
  }
  auto result = FromJson(tok, config, gen, tmpl);
  if (!result.ok()) {
    return absl::Status(result.status().code(),
                        absl::StrCat(dir.string(), "/", result.status().message()));
  }
  return result;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(
    std::string_view tokenizer_json, std::string_view config_json,
    std::string_view generation_config_json, std::string_view chat_template_file) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  absl::Status s;
  try {
    s = t->Init(tokenizer_json, config_json, generation_config_json, chat_template_file);
  } catch (const json::exception& e) {  // a field of an unexpected type deep inside
    s = absl::InvalidArgumentError(absl::StrCat(kTokJson, ": ", e.what()));
  }
  if (!s.ok()) return s;
  return t;
}

absl::Status Tokenizer::Init(std::string_view tokenizer_json, std::string_view config_json,
                             std::string_view generation_config_json,
                             std::string_view chat_template_file) {
  ASSIGN_OR_RETURN(const json j, ParseJson(tokenizer_json, kTokJson));
  json config = json::object();
  if (!config_json.empty()) {
    ASSIGN_OR_RETURN(config, ParseJson(config_json, kConfigJson));
  }

  // Model.
  auto mit = j.find("model");
  if (mit == j.end() || !mit->is_object()) return Err(kTokJson, "model", "missing object");
  const json& m = *mit;
  const std::string type = m.value("type", std::string("BPE"));
  if (type != "BPE") {
    return absl::UnimplementedError(
        absl::StrCat(kTokJson, ": model.type: '", type, "' is not supported (only BPE)"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (m.contains(key) && m[key].is_string() && !m[key].get<std::string>().empty()) {
      return absl::UnimplementedError(absl::StrCat(kTokJson, ": model.", key, ": not supported"));
    }
  }
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0) {
    return absl::UnimplementedError(absl::StrCat(kTokJson, ": model.dropout: not supported"));
  }
  auto vit = m.find("vocab");
  if (vit == m.end() || !vit->is_object()) return Err(kTokJson, "model.vocab", "missing object");
  absl::flat_hash_map<std::string, int32_t> vocab;
  vocab.reserve(vit->size());
  int32_t max_id = -1;
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30)) {
      return Err(kTokJson, absl::StrCat("model.vocab[\"", it.key(), "\"]"),
                 "id is not a valid integer");
    }
    const auto id = it.value().get<int32_t>();
    max_id = std::max(max_id, id);
    vocab.emplace(it.key(), id);
  }
  auto merges_it = m.find("merges");
  if (merges_it == m.end() || !merges_it->is_array()) {
    return Err(kTokJson, "model.merges", "missing array");
  }
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_it->size());
  for (size_t i = 0; i < merges_it->size(); ++i) {
    const json& e = (*merges_it)[i];
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const size_t sp = s.find(' ', 1);
      if (sp == std::string::npos) {
        return Err(kTokJson, absl::StrCat("model.merges[", i, "]"), "expected \"left right\"");
      }
      merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
    } else {
      return Err(kTokJson, absl::StrCat("model.merges[", i, "]"), "expected a pair of strings");
    }
  }
  BpeModel::Options opts;
  opts.byte_fallback = GetBoolOr(m, "byte_fallback", false);
  opts.fuse_unk = GetBoolOr(m, "fuse_unk", false);
  opts.ignore_merges = GetBoolOr(m, "ignore_merges", false);
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto u = vocab.find(m["unk_token"].get<std::string>());
    if (u == vocab.end()) return Err(kTokJson, "model.unk_token", "not in the vocabulary");
    opts.unk_id = u->second;
  }

  // Added tokens.
  auto ait = j.find("added_tokens");
  std::vector<AddedToken> added;
  if (ait != j.end() && !ait->is_null()) {
    if (!ait->is_array()) return Err(kTokJson, "added_tokens", "not an array");
    for (size_t i = 0; i < ait->size(); ++i) {
      const json& a = (*ait)[i];
      const std::string field = absl::StrCat("added_tokens[", i, "]");
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return Err(kTokJson, field, "expected {\"id\": int, \"content\": string, ...}");
      }
      AddedToken t;
      t.id = a["id"].get<int32_t>();
      t.content = a["content"].get<std::string>();
      if (t.id < 0 || t.content.empty()) return Err(kTokJson, field, "bad id or empty content");
      t.special = GetBoolOr(a, "special", false);
      t.lstrip = GetBoolOr(a, "lstrip", false);
      t.rstrip = GetBoolOr(a, "rstrip", false);
      t.normalized = GetBoolOr(a, "normalized", !t.special);
      max_id = std::max(max_id, t.id);
      added.push_back(std::move(t));
    }
  }

  id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
  is_added_.assign(id_to_token_.size(), 2);  // 2 = hole
  for (const auto& [tok, id] : vocab) {
    id_to_token_[id] = tok;
    is_added_[id] = 0;
  }

  ASSIGN_OR_RETURN(normalizer_,
                   ParseNormalizer(j.value("normalizer", json()), "tokenizer.json: normalizer"));
  ASSIGN_OR_RETURN(pre_tokenizer_, ParsePreTokenizer(j.value("pre_tokenizer", json()),
                                                     "tokenizer.json: pre_tokenizer"));
  ASSIGN_OR_RETURN(decoder_,
                   TokenDecoder::Parse(j.value("decoder", json()), "tokenizer.json: decoder"));
  ASSIGN_OR_RETURN(model_,
                   BpeModel::Create(std::move(vocab), merges, opts, "tokenizer.json: model"));
  if (model_->TokenToId(kMetaspace) >= 0 && model_->CanSplitBefore(kMetaspace)) {
    split_before_ = kMetaspace;
  }

  added_tokens_ = std::move(added);
  for (size_t i = 0; i < added_tokens_.size(); ++i) {
    const AddedToken& t = added_tokens_[i];
    id_to_token_[t.id] = t.content;
    is_added_[t.id] = 1;
    added_by_content_[t.content] = t.id;
    if (t.special) special_ids_.insert(t.id);
    if (t.normalized && normalizer_ != nullptr) {
      const std::string content = normalizer_->Normalize(t.content);
      normalized_trie_.Insert(content, static_cast<int32_t>(i));
      if (!t.special) normalized_trie_plain_.Insert(content, static_cast<int32_t>(i));
    } else {
      raw_trie_.Insert(t.content, static_cast<int32_t>(i));
      if (!t.special) raw_trie_plain_.Insert(t.content, static_cast<int32_t>(i));
    }
  }
  auto token_id = [this](const std::string& s) {
    auto id = TokenToId(s);
    return id.has_value() ? *id : -1;
  };

  // Post-processor, then tokenizer_config.json.
  bool has_template = false;
  RETURN_IF_ERROR(ParsePostProcessor(j.value("post_processor", json()), "post_processor", token_id,
                                     &prefix_ids_, &suffix_ids_, &has_template));
  ASSIGN_OR_RETURN(bos_token_, ConfigToken(config, "bos_token"));
  ASSIGN_OR_RETURN(eos_token_, ConfigToken(config, "eos_token"));
  ASSIGN_OR_RETURN(const std::string pad_token, ConfigToken(config, "pad_token"));
  bos_id_ = bos_token_.empty() ? -1 : token_id(bos_token_);
  eos_id_ = eos_token_.empty() ? -1 : token_id(eos_token_);
  pad_id_ = pad_token.empty() ? -1 : token_id(pad_token);
  if (!bos_token_.empty() && bos_id_ < 0)
    return Err(kConfigJson, "bos_token", "not in the vocabulary");
  if (!eos_token_.empty() && eos_id_ < 0)
    return Err(kConfigJson, "eos_token", "not in the vocabulary");
  if (!has_template) {
    if (GetBoolOr(config, "add_bos_token", false) && bos_id_ >= 0) prefix_ids_.push_back(bos_id_);
    if (GetBoolOr(config, "add_eos_token", false) && eos_id_ >= 0) suffix_ids_.push_back(eos_id_);
  }
  if (auto it = config.find("additional_special_tokens"); it != config.end() && it->is_array()) {
    for (const auto& v : *it) {
      const std::string s = v.is_string()   ? v.get<std::string>()
                            : v.is_object() ? v.value("content", std::string())
                                            : std::string();
      const int32_t id = token_id(s);
      if (id >= 0) special_ids_.insert(id);
    }
  }
  clean_up_tokenization_spaces_ = GetBoolOr(config, "clean_up_tokenization_spaces", false);
  if (auto it = config.find("chat_template"); it != config.end() && !it->is_null()) {
    if (it->is_string()) {
      chat_template_ = it->get<std::string>();
    } else if (it->is_array()) {  // [{"name": ..., "template": ...}]: prefer "default"
      for (const auto& e : *it) {
        if (!e.is_object() || !e.contains("template") || !e["template"].is_string()) {
          return Err(kConfigJson, "chat_template", "expected [{\"name\", \"template\"}]");
        }
        if (chat_template_.empty() || e.value("name", std::string()) == "default") {
          chat_template_ = e["template"].get<std::string>();
        }
      }
    } else {
      return Err(kConfigJson, "chat_template", "expected a string or a list");
    }
  }
  if (chat_template_.empty()) chat_template_ = std::string(chat_template_file);

  if (eos_id_ >= 0) eos_ids_.push_back(eos_id_);
  if (!generation_config_json.empty()) {
    ASSIGN_OR_RETURN(const json gen, ParseJson(generation_config_json, kGenConfigJson));
    if (auto it = gen.find("eos_token_id"); it != gen.end() && !it->is_null()) {
      std::vector<json> ids =
          it->is_array() ? it->get<std::vector<json>>() : std::vector<json>{*it};
      for (const auto& v : ids) {
        if (!v.is_number_integer()) return Err(kGenConfigJson, "eos_token_id", "not an integer");
        const auto id = v.get<int32_t>();
        if (std::find(eos_ids_.begin(), eos_ids_.end(), id) == eos_ids_.end())
          eos_ids_.push_back(id);
      }
    }
  }
  return absl::OkStatus();
}

std::optional<std::string_view> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || is_added_[id] == 2) return std::nullopt;
  return std::string_view(id_to_token_[id]);
}

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const {
  if (auto it = added_by_content_.find(AbslView(token)); it != added_by_content_.end())
    return it->second;
  const int32_t id = model_->TokenToId(token);
  if (id < 0) return std::nullopt;
  return id;
}

bool Tokenizer::IsEos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

std::vector<int32_t> Tokenizer::Encode(std::string_view input, bool add_special_tokens,
                                       bool parse_special_tokens) const {
  std::string repaired;
  std::string_view text = input;
  if (!IsValidUtf8(text)) {
    repaired = Utf8Lossy(text);
    text = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 8);
  if (add_special_tokens) out.insert(out.end(), prefix_ids_.begin(), prefix_ids_.end());
  const auto sections = SplitAdded(parse_special_tokens ? raw_trie_ : raw_trie_plain_, text);
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].token >= 0) {
      out.push_back(added_tokens_[sections[i].token].id);
    } else if (!sections[i].text.empty()) {
      EncodeSection(sections[i].text, i == 0, parse_special_tokens, &out);
    }
  }
  if (add_special_tokens) out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

void Tokenizer::EncodeSection(std::string_view text, bool at_text_start, bool parse_special,
                              std::vector<int32_t>* out) const {
  std::string normalized =
      normalizer_ != nullptr ? normalizer_->Normalize(std::string(text)) : std::string(text);
  if (normalized.empty()) return;
  for (const auto& sub :
       SplitAdded(parse_special ? normalized_trie_ : normalized_trie_plain_, normalized)) {
    if (sub.token >= 0) {
      out->push_back(added_tokens_[sub.token].id);
    } else if (!sub.text.empty()) {
      EncodeNormalized(std::string(sub.text), at_text_start, out);
    }
  }
}

void Tokenizer::EncodeNormalized(const std::string& text, bool at_text_start,
                                 std::vector<int32_t>* out) const {
  std::vector<std::string> pieces{text};
  if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&pieces, at_text_start);
  for (const auto& piece : pieces) {
    if (split_before_.empty()) {
      model_->EncodeWord(piece, out);
      continue;
    }
    // Cut before each separator that follows a different character (see CanSplitBefore).
    const std::string_view p = piece, sep = split_before_;
    size_t start = 0, pos = p.find(sep, 1);
    while (pos != std::string_view::npos) {
      const bool prev_is_sep =
          pos >= sep.size() && p.compare(pos - sep.size(), sep.size(), sep) == 0;
      if (!prev_is_sep) {
        model_->EncodeWord(p.substr(start, pos - start), out);
        start = pos;
      }
      pos = p.find(sep, pos + sep.size());
    }
    model_->EncodeWord(p.substr(start), out);
  }
}

bool Tokenizer::AppendTokenBytes(int32_t id, bool is_first, bool skip_special,
                                 std::string* out) const {
  if (id < 0 || id >= vocab_size() || is_added_[id] == 2) return false;
  if (skip_special && special_ids_.contains(id)) return false;
  decoder_.AppendToken(id_to_token_[id], is_added_[id] == 1, is_first, out);
  return true;
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, bool skip_special_tokens) const {
  DecodeOptions options;
  options.skip_special_tokens = skip_special_tokens;
  return Decode(ids, options);
}

std::string Tokenizer::Decode(absl::Span<const int32_t> ids, const DecodeOptions& options) const {
  std::string raw;
  bool first = true;
  for (int32_t id : ids) {
    if (AppendTokenBytes(id, first, options.skip_special_tokens, &raw)) first = false;
  }
  std::string_view v = raw;
  const std::string& c = decoder_.strip_content();
  if (!c.empty()) {
    for (int i = 0; i < decoder_.strip_start() && v.substr(0, c.size()) == c; ++i)
      v.remove_prefix(c.size());
    for (int i = 0;
         i < decoder_.strip_stop() && v.size() >= c.size() && v.substr(v.size() - c.size()) == c;
         ++i) {
      v.remove_suffix(c.size());
    }
  }
  std::string text = Utf8Lossy(v);
  if (options.clean_up_tokenization_spaces) text = CleanUpTokenization(std::move(text));
  return text;
}

}  // namespace moe::tokenizer
