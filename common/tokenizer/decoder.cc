#include "common/tokenizer/decoder.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/base/status_macros.h"
#include "common/tokenizer/text_pipeline.h"
#include "common/tokenizer/unicode.h"

namespace moe::tokenizer {
namespace {

using nlohmann::json;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// "<0xNN>" -> NN, else -1.
int ByteFallbackValue(std::string_view t) {
  if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return -1;
  const int hi = HexDigit(t[3]), lo = HexDigit(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string_view StripChars(std::string_view s, std::string_view c, int start, int stop) {
  for (int i = 0; i < start && !c.empty() && s.substr(0, c.size()) == c; ++i)
    s.remove_prefix(c.size());
  for (int i = 0;
       i < stop && !c.empty() && s.size() >= c.size() && s.substr(s.size() - c.size()) == c; ++i) {
    s.remove_suffix(c.size());
  }
  return s;
}

absl::StatusOr<int> GetInt(const json& j, const char* key, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return 0;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": '", key, "' is not a count"));
  }
  return static_cast<int>(it->get<int64_t>());
}

}  // namespace

absl::StatusOr<TokenDecoder> TokenDecoder::Parse(const json& j, const std::string& where) {
  TokenDecoder d;
  if (j.is_null()) {
    d.no_decoder_ = true;
    return d;
  }
  bool fused = false;
  RETURN_IF_ERROR(d.AddOps(j, where, &fused));
  return d;
}

absl::Status TokenDecoder::AddOps(const json& j, const std::string& where, bool* fused) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": missing string field 'type'"));
  }
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": missing array 'decoders'"));
    }
    for (size_t i = 0; i < it->size(); ++i) {
      RETURN_IF_ERROR(AddOps((*it)[i], absl::StrCat(where, ".decoders[", i, "]"), fused));
    }
    return absl::OkStatus();
  }
  if (type == "Fuse") {
    *fused = true;
    return absl::OkStatus();
  }
  if (type == "Strip") {
    std::string content = " ";
    if (auto it = j.find("content"); it != j.end() && it->is_string())
      content = it->get<std::string>();
    ASSIGN_OR_RETURN(int start, GetInt(j, "start", where));
    ASSIGN_OR_RETURN(int stop, GetInt(j, "stop", where));
    if (*fused) {
      if (!strip_content_.empty() && strip_content_ != content) {
        return absl::UnimplementedError(absl::StrCat(where, ": two different Strip decoders"));
      }
      strip_content_ = content;
      strip_start_ += start;
      strip_stop_ += stop;
    } else {
      ops_.push_back({Op::kStrip, content, "", false, start, stop});
    }
    return absl::OkStatus();
  }
  if (*fused) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": decoder '", type, "' after Fuse is not supported"));
  }
  if (type == "ByteLevel") {
    ops_.push_back({Op::kByteLevel, "", "", false, 0, 0});
  } else if (type == "ByteFallback") {
    ops_.push_back({Op::kByteFallback, "", "", false, 0, 0});
  } else if (type == "Replace") {
    auto it = j.find("pattern");
    if (it == j.end() || !it->is_object() || !it->contains("String") ||
        !(*it)["String"].is_string()) {
      return absl::UnimplementedError(
          absl::StrCat(where, ".pattern: only String patterns are supported in decoders"));
    }
    std::string content;
    if (auto c = j.find("content"); c != j.end() && c->is_string()) content = c->get<std::string>();
    ops_.push_back({Op::kReplace, (*it)["String"].get<std::string>(), content, false, 0, 0});
  } else if (type == "Metaspace") {
    std::string replacement = "\xE2\x96\x81";
    if (auto it = j.find("replacement"); it != j.end() && it->is_string()) {
      replacement = it->get<std::string>();
    }
    bool strip_first = true;
    if (auto it = j.find("prepend_scheme"); it != j.end() && it->is_string()) {
      strip_first = it->get<std::string>() != "never";
    } else if (auto it = j.find("add_prefix_space"); it != j.end() && it->is_boolean()) {
      strip_first = it->get<bool>();
    }
    ops_.push_back({Op::kMetaspace, replacement, " ", strip_first, 0, 0});
  } else {
    return absl::UnimplementedError(
        absl::StrCat(where, ": decoder type '", type, "' is not supported"));
  }
  return absl::OkStatus();
}

void TokenDecoder::AppendToken(std::string_view token, bool is_added, bool is_first,
                               std::string* out) const {
  if (no_decoder_) {
    if (!is_first) out->push_back(' ');
    out->append(token);
    return;
  }
  std::string t(token);
  for (const Op& op : ops_) {
    switch (op.kind) {
      case Op::kReplace:
        if (!op.from.empty()) t = absl::StrReplaceAll(t, {{op.from, op.to}});
        break;
      case Op::kByteFallback: {
        const int b = ByteFallbackValue(t);
        if (b >= 0) t.assign(1, static_cast<char>(b));
        break;
      }
      case Op::kByteLevel: {
        if (is_added) break;
        std::string bytes;
        bytes.reserve(t.size());
        for (size_t pos = 0; pos < t.size();) {
          const size_t start = pos;
          const int b = UnicodeToByte(NextCodePoint(t, &pos));
          if (b >= 0) {
            bytes.push_back(static_cast<char>(b));
          } else {
            bytes.append(t, start, pos - start);
          }
        }
        t = std::move(bytes);
        break;
      }
      case Op::kMetaspace:
        t = absl::StrReplaceAll(t, {{op.from, op.to}});
        if (is_first && op.strip_first && !t.empty() && t[0] == ' ') t.erase(0, 1);
        break;
      case Op::kStrip:
        t = std::string(StripChars(t, op.from, op.start, op.stop));
        break;
    }
  }
  out->append(t);
}

}  // namespace moe::tokenizer
