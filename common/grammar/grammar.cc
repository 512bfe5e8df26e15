#include "common/grammar/grammar.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace moe::grammar {
namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

int Utf8Encode(uint32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// Splits [lo, hi] (no surrogates inside) until each piece encodes as one sequence of byte
// ranges: first at the encoded-length boundaries, then where continuation bytes do not span
// their full 0x80..0xBF range (the algorithm of Rust's regex-syntax utf8 module).
void PushSequences(uint32_t lo, uint32_t hi,
                   std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  if (lo > hi) return;
  for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= max && max < hi) {
      PushSequences(lo, max, out);
      PushSequences(max + 1, hi, out);
      return;
    }
  }
  if (hi < 0x80) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        PushSequences(lo, lo | m, out);
        PushSequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        PushSequences(lo, (hi & ~m) - 1, out);
        PushSequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = Utf8Encode(lo, a);
  Utf8Encode(hi, b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
  out->push_back(std::move(seq));
}

std::string ByteSetString(const ByteSet& set) {
  if (set.count() == 1) {
    for (int b = 0; b < 256; ++b) {
      if (set[b]) {
        if (b >= 0x20 && b < 0x7f && b != '"' && b != '\\')
          return absl::StrCat("\"", std::string(1, static_cast<char>(b)), "\"");
        return absl::StrFormat("\\x%02x", b);
      }
    }
  }
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!set[b]) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && set[e + 1]) ++e;
    auto one = [](int c) {
      return c >= 0x21 && c < 0x7f && c != ']' && c != '\\' && c != '-'
                 ? std::string(1, static_cast<char>(c))
                 : absl::StrFormat("\\x%02x", c);
    };
    out += one(b);
    if (e > b) out += absl::StrCat("-", one(e));
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::vector<std::vector<std::pair<uint8_t, uint8_t>>> Utf8Sequences(uint32_t lo, uint32_t hi) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> out;
  hi = std::min(hi, kMaxCodepoint);
  if (lo > hi) return out;
  // Surrogates are not scalar values: never encode them.
  if (lo < 0xD800 && hi >= 0xD800) {
    PushSequences(lo, 0xD7FF, &out);
    if (hi > 0xDFFF) PushSequences(0xE000, hi, &out);
  } else if (lo >= 0xD800 && lo <= 0xDFFF) {
    if (hi > 0xDFFF) PushSequences(0xE000, hi, &out);
  } else {
    PushSequences(lo, hi, &out);
  }
  return out;
}

CodepointRanges NormalizeRanges(CodepointRanges ranges) {
  std::sort(ranges.begin(), ranges.end());
  CodepointRanges out;
  for (const auto& [lo, hi] : ranges) {
    if (lo > hi) continue;
    if (!out.empty() && lo <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, hi);
    } else {
      out.emplace_back(lo, hi);
    }
  }
  return out;
}

CodepointRanges NegateRanges(const CodepointRanges& ranges) {
  CodepointRanges out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : NormalizeRanges(ranges)) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
  }
  if (next <= kMaxCodepoint) out.emplace_back(next, kMaxCodepoint);
  return out;
}

ExprId Grammar::Add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

RuleId Grammar::AddRule(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(-1);
  return static_cast<RuleId>(names_.size() - 1);
}

void Grammar::SetBody(RuleId rule, ExprId body) { bodies_[static_cast<size_t>(rule)] = body; }

ExprId Grammar::Empty() { return Add(Expr{}); }

ExprId Grammar::Bytes(const ByteSet& bytes) {
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.bytes = bytes;
  return Add(std::move(e));
}

ExprId Grammar::Byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return Bytes(s);
}

ExprId Grammar::ByteRange(uint8_t lo, uint8_t hi) {
  ByteSet s;
  for (int b = lo; b <= hi; ++b) s.set(static_cast<size_t>(b));
  return Bytes(s);
}

ExprId Grammar::Literal(std::string_view text) {
  if (text.size() == 1) return Byte(static_cast<uint8_t>(text[0]));
  std::vector<ExprId> parts;
  parts.reserve(text.size());
  for (char c : text) parts.push_back(Byte(static_cast<uint8_t>(c)));
  return Seq(std::move(parts));
}

ExprId Grammar::Seq(std::vector<ExprId> parts) {
  if (parts.size() == 1) return parts[0];
  Expr e;
  e.kind = Expr::Kind::kSeq;
  e.children = std::move(parts);
  return Add(std::move(e));
}

ExprId Grammar::Alt(std::vector<ExprId> options) {
  if (options.size() == 1) return options[0];
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.children = std::move(options);
  return Add(std::move(e));
}

ExprId Grammar::Repeat(ExprId child, int32_t min, int32_t max) {
  if (min == 1 && max == 1) return child;
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.children = {child};
  e.min = min;
  e.max = max;
  return Add(std::move(e));
}

ExprId Grammar::Ref(RuleId rule) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  e.rule = rule;
  return Add(std::move(e));
}

ExprId Grammar::Codepoints(const CodepointRanges& ranges) {
  // Sequences sharing a lead-byte range are grouped so the alternatives stay few.
  std::vector<ExprId> options;
  for (const auto& [lo, hi] : NormalizeRanges(ranges)) {
    for (const auto& seq : Utf8Sequences(lo, hi)) {
      std::vector<ExprId> parts;
      for (const auto& [a, b] : seq) parts.push_back(ByteRange(a, b));
      options.push_back(Seq(std::move(parts)));
    }
  }
  if (options.empty()) return Bytes(ByteSet());
  return Alt(std::move(options));
}

absl::Status Grammar::Validate() const {
  if (root_ < 0 || root_ >= num_rules()) return absl::InvalidArgumentError("grammar: no root rule");
  for (RuleId r = 0; r < num_rules(); ++r) {
    const ExprId b = bodies_[static_cast<size_t>(r)];
    if (b < 0 || b >= num_exprs()) {
      return absl::InvalidArgumentError(
          absl::StrCat("grammar: rule '", names_[static_cast<size_t>(r)], "' has no body"));
    }
  }
  for (const Expr& e : exprs_) {
    for (ExprId c : e.children) {
      if (c < 0 || c >= num_exprs())
        return absl::InvalidArgumentError("grammar: bad expression id");
    }
    if (e.kind == Expr::Kind::kRef && (e.rule < 0 || e.rule >= num_rules())) {
      return absl::InvalidArgumentError("grammar: reference to an unknown rule");
    }
    if (e.kind == Expr::Kind::kRepeat &&
        (e.children.size() != 1 || e.min < 0 || (e.max != -1 && e.max < e.min))) {
      return absl::InvalidArgumentError("grammar: bad repetition bounds");
    }
  }
  return absl::OkStatus();
}

std::string Grammar::ExprString(ExprId id) const {
  const Expr& e = expr(id);
  switch (e.kind) {
    case Expr::Kind::kEmpty:
      return "\"\"";
    case Expr::Kind::kBytes:
      return ByteSetString(e.bytes);
    case Expr::Kind::kSeq: {
      std::vector<std::string> parts;
      for (ExprId c : e.children) parts.push_back(ExprString(c));
      return absl::StrCat("(", absl::StrJoin(parts, " "), ")");
    }
    case Expr::Kind::kAlt: {
      std::vector<std::string> parts;
      for (ExprId c : e.children) parts.push_back(ExprString(c));
      return absl::StrCat("(", absl::StrJoin(parts, " | "), ")");
    }
    case Expr::Kind::kRepeat:
      return absl::StrCat(ExprString(e.children[0]), "{", e.min, ",",
                          e.max < 0 ? std::string() : absl::StrCat(e.max), "}");
    case Expr::Kind::kRef:
      return rule_name(e.rule);
  }
  return "?";
}

std::string Grammar::DebugString() const {
  std::string out;
  for (RuleId r = 0; r < num_rules(); ++r) {
    absl::StrAppend(&out, r == root_ ? "root " : "", rule_name(r),
                    " ::= ", rule_body(r) >= 0 ? ExprString(rule_body(r)) : "<none>", "\n");
  }
  return out;
}

}  // namespace moe::grammar
