#include "common/tokenizer/text_pipeline.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/regex.h"
#include "common/tokenizer/unicode.h"

namespace moe::tokenizer {
namespace {

using nlohmann::json;

absl::Status FieldError(const std::string& where, std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", std::string(what)));
}

absl::StatusOr<std::string> GetString(const json& j, const char* key, const std::string& where,
                                      std::string def, bool required = false) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return FieldError(where, absl::StrCat("missing string field '", key, "'"));
    return def;
  }
  if (!it->is_string()) return FieldError(where, absl::StrCat("field '", key, "' is not a string"));
  return it->get<std::string>();
}

absl::StatusOr<bool> GetBool(const json& j, const char* key, const std::string& where, bool def) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) return FieldError(where, absl::StrCat("field '", key, "' is not a bool"));
  return it->get<bool>();
}

absl::StatusOr<std::string> GetType(const json& j, const std::string& where) {
  if (!j.is_object()) return FieldError(where, "expected an object");
  return GetString(j, "type", where, "", /*required=*/true);
}

// ---- normalizers ----

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  std::string Normalize(std::string text) const override {
    for (const auto& p : parts_) text = p->Normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string Normalize(std::string text) const override {
    if (text.empty()) return text;  // HF prepends only to non-empty text
    return prefix_ + text;
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> re, std::string content)
      : re_(std::move(re)), content_(std::move(content)) {}
  std::string Normalize(std::string text) const override { return re_->ReplaceAll(text, content_); }

 private:
  std::unique_ptr<Regex> re_;
  std::string content_;
};

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string Normalize(std::string text) const override {
    auto out = Normalize_(text);
    return out.ok() ? std::move(out).value() : text;
  }

 private:
  absl::StatusOr<std::string> Normalize_(const std::string& text) const {
    return tokenizer::Normalize(text, form_);
  }
  NormalForm form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string Normalize(std::string text) const override { return ToLower(text); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string Normalize(std::string text) const override {
    std::string_view v = text;
    if (left_) v = TrimStart(v);
    if (right_) v = TrimEnd(v);
    return std::string(v);
  }

 private:
  bool left_, right_;
};

// ---- pre-tokenizers ----

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Splits `s` around the regex matches as HF's NormalizedString::split does.
void SplitPiece(const Regex& re, SplitBehavior behavior, bool invert, const std::string& s,
                std::vector<std::string>* out) {
  // (start, end, is_match) over the whole piece.
  struct Part {
    size_t start, end;
    bool match;
  };
  std::vector<Part> parts;
  size_t prev = 0;
  for (const auto& [start, end] : re.FindAll(s)) {
    if (start > prev) parts.push_back({prev, start, invert});
    parts.push_back({start, end, !invert});
    prev = end;
  }
  if (prev < s.size()) parts.push_back({prev, s.size(), invert});

  std::vector<std::pair<size_t, size_t>> spans;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& p : parts)
        if (!p.match) spans.emplace_back(p.start, p.end);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& p : parts) spans.emplace_back(p.start, p.end);
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.match && prev_match && !spans.empty()) {
          spans.back().second = p.end;
        } else {
          spans.emplace_back(p.start, p.end);
        }
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (p.match && !prev_match && !spans.empty()) {
          spans.back().second = p.end;
        } else {
          spans.emplace_back(p.start, p.end);
        }
        prev_match = p.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (const auto& p : parts) {
        if (!p.match && prev_match && !spans.empty()) {
          spans.back().second = p.end;
        } else {
          spans.emplace_back(p.start, p.end);
        }
        prev_match = p.match;
      }
      break;
    }
  }
  for (const auto& [a, b] : spans)
    if (b > a) out->push_back(s.substr(a, b - a));
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool at_text_start) const override {
    for (const auto& p : parts_) p->PreTokenize(pieces, at_text_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 2);
    for (const auto& piece : *pieces) SplitPiece(*re_, behavior_, invert_, piece, &out);
    *pieces = std::move(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> split;
    split.reserve(pieces->size());
    for (auto& piece : *pieces) {
      if (add_prefix_space_ && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (re_ != nullptr) {
        SplitPiece(*re_, SplitBehavior::kIsolated, false, piece, &split);
      } else if (!piece.empty()) {
        split.push_back(std::move(piece));
      }
    }
    for (auto& s : split) s = ByteLevelEncode(s);
    *pieces = std::move(split);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;  // null when use_regex is false
};

enum class PrependScheme { kAlways, kNever, kFirst };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split,
                        std::unique_ptr<Regex> re)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split), re_(std::move(re)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool at_text_start) const override {
    std::vector<std::string> out;
    bool first = true;
    for (auto& piece : *pieces) {
      std::string s;
      s.reserve(piece.size() + replacement_.size());
      for (char c : piece) {
        if (c == ' ') {
          s += replacement_;
        } else {
          s.push_back(c);
        }
      }
      const bool prepend = scheme_ == PrependScheme::kAlways ||
                           (scheme_ == PrependScheme::kFirst && at_text_start && first);
      if (prepend && s.compare(0, replacement_.size(), replacement_) != 0)
        s.insert(0, replacement_);
      first = false;
      if (split_) {
        SplitPiece(*re_, SplitBehavior::kMergedWithNext, false, s, &out);
      } else if (!s.empty()) {
        out.push_back(std::move(s));
      }
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  std::unique_ptr<Regex> re_;  // the replacement as a literal
};

absl::StatusOr<SplitBehavior> ParseBehavior(const std::string& s, const std::string& where) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return FieldError(where, absl::StrCat("unknown split behavior '", s, "'"));
}

absl::StatusOr<std::unique_ptr<Regex>> CompileAt(const std::string& pattern,
                                                 const std::string& where) {
  auto re = Regex::Compile(pattern);
  if (!re.ok()) return FieldError(where, std::string(re.status().message()));
  return std::move(re).value();
}

}  // namespace

absl::StatusOr<std::string> ParsePattern(const json& j, const std::string& where) {
  if (!j.is_object()) return FieldError(where, "pattern is not an object");
  if (auto it = j.find("Regex"); it != j.end() && it->is_string()) return it->get<std::string>();
  if (auto it = j.find("String"); it != j.end() && it->is_string()) {
    const std::string s = it->get<std::string>();
    std::string out = "\\Q";
    for (size_t pos = 0;;) {
      const size_t e = s.find("\\E", pos);
      if (e == std::string::npos) {
        out += s.substr(pos);
        break;
      }
      out += s.substr(pos, e - pos) + "\\E\\\\E\\Q";
      pos = e + 2;
    }
    return out + "\\E";
  }
  return FieldError(where, "pattern has neither 'String' nor 'Regex'");
}

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& j,
                                                            const std::string& where) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  ASSIGN_OR_RETURN(const std::string type, GetType(j, where));
  if (type == "Sequence") {
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return FieldError(where, "missing array 'normalizers'");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      ASSIGN_OR_RETURN(auto p,
                       ParseNormalizer((*it)[i], absl::StrCat(where, ".normalizers[", i, "]")));
      if (p != nullptr) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  if (type == "Prepend") {
    ASSIGN_OR_RETURN(std::string prefix, GetString(j, "prepend", where, "", true));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(prefix)));
  }
  if (type == "Replace") {
    if (!j.contains("pattern")) return FieldError(where, "missing 'pattern'");
    ASSIGN_OR_RETURN(std::string pattern, ParsePattern(j["pattern"], where + ".pattern"));
    ASSIGN_OR_RETURN(std::string content, GetString(j, "content", where, ""));
    ASSIGN_OR_RETURN(auto re, CompileAt(pattern, where + ".pattern"));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(re), std::move(content)));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(NormalForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Strip") {
    ASSIGN_OR_RETURN(bool left, GetBool(j, "strip_left", where, true));
    ASSIGN_OR_RETURN(bool right, GetBool(j, "strip_right", where, true));
    return std::unique_ptr<Normalizer>(new StripNormalizer(left, right));
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ": normalizer type '", type, "' is not supported"));
}

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& j,
                                                                const std::string& where) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  ASSIGN_OR_RETURN(const std::string type, GetType(j, where));
  if (type == "Sequence") {
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return FieldError(where, "missing array 'pretokenizers'");
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (size_t i = 0; i < it->size(); ++i) {
      ASSIGN_OR_RETURN(auto p,
                       ParsePreTokenizer((*it)[i], absl::StrCat(where, ".pretokenizers[", i, "]")));
      if (p != nullptr) parts.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Split") {
    if (!j.contains("pattern")) return FieldError(where, "missing 'pattern'");
    ASSIGN_OR_RETURN(std::string pattern, ParsePattern(j["pattern"], where + ".pattern"));
    ASSIGN_OR_RETURN(std::string behavior_name, GetString(j, "behavior", where, "", true));
    ASSIGN_OR_RETURN(SplitBehavior behavior, ParseBehavior(behavior_name, where + ".behavior"));
    ASSIGN_OR_RETURN(bool invert, GetBool(j, "invert", where, false));
    ASSIGN_OR_RETURN(auto re, CompileAt(pattern, where + ".pattern"));
    return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(re), behavior, invert));
  }
  if (type == "ByteLevel") {
    ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", where, true));
    ASSIGN_OR_RETURN(bool use_regex, GetBool(j, "use_regex", where, true));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      ASSIGN_OR_RETURN(re, CompileAt(kGpt2Pattern, where));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(add_prefix_space, std::move(re)));
  }
  if (type == "Metaspace") {
    ASSIGN_OR_RETURN(std::string replacement, GetString(j, "replacement", where, "\xE2\x96\x81"));
    ASSIGN_OR_RETURN(std::string scheme_name, GetString(j, "prepend_scheme", where, ""));
    PrependScheme scheme = PrependScheme::kAlways;
    if (scheme_name.empty()) {
      ASSIGN_OR_RETURN(bool add_prefix_space, GetBool(j, "add_prefix_space", where, true));
      scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    } else if (scheme_name == "never") {
      scheme = PrependScheme::kNever;
    } else if (scheme_name == "first") {
      scheme = PrependScheme::kFirst;
    } else if (scheme_name != "always") {
      return FieldError(where, absl::StrCat("unknown prepend_scheme '", scheme_name, "'"));
    }
    ASSIGN_OR_RETURN(bool split, GetBool(j, "split", where, true));
    if (replacement.empty()) return FieldError(where, "empty 'replacement'");
    ASSIGN_OR_RETURN(auto re, Regex::Literal(replacement));
    return std::unique_ptr<PreTokenizer>(
        new MetaspacePreTokenizer(std::move(replacement), scheme, split, std::move(re)));
  }
  if (type == "Digits") {
    ASSIGN_OR_RETURN(bool individual, GetBool(j, "individual_digits", where, false));
    ASSIGN_OR_RETURN(auto re, CompileAt(individual ? "\\p{N}" : "\\p{N}+", where));
    return std::unique_ptr<PreTokenizer>(
        new SplitPreTokenizer(std::move(re), SplitBehavior::kIsolated, false));
  }
  return absl::UnimplementedError(
      absl::StrCat(where, ": pre_tokenizer type '", type, "' is not supported"));
}

}  // namespace moe::tokenizer
