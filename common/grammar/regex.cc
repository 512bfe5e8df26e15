#include "common/grammar/regex.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace moe::grammar {
namespace {

constexpr int32_t kMaxCount = 1000;

CodepointRanges Digits() { return {{'0', '9'}}; }
CodepointRanges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
CodepointRanges Space() { return {{'\t', '\r'}, {' ', ' '}}; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class RegexParser {
 public:
  RegexParser(std::string_view p, RegexContext ctx, Grammar* g) : p_(p), ctx_(ctx), g_(g) {}

  absl::StatusOr<ExprId> Parse() {
    ExprId e = ParseAlt(0);
    if (error_.ok() && i_ < p_.size())
      Fail(p_[i_] == ')' ? "unbalanced ')'" : "unexpected character");
    if (!error_.ok()) return error_;
    return e;
  }

 private:
  void Fail(const std::string& what) {
    if (error_.ok()) {
      error_ = absl::InvalidArgumentError(absl::StrCat("regex: ", what, " at offset ", i_));
    }
  }
  bool AtEnd() const { return i_ >= p_.size(); }
  char Peek() const { return p_[i_]; }

  ExprId Chars(const CodepointRanges& set) {
    return ctx_ == RegexContext::kRaw ? g_->Codepoints(set) : JsonStringCharacters(set, g_);
  }

  // One UTF-8 code point of the pattern.
  uint32_t NextCodepoint() {
    const auto b0 = static_cast<uint8_t>(p_[i_]);
    int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (n == 0 || i_ + n > p_.size()) {
      Fail("invalid UTF-8 in the pattern");
      ++i_;
      return 0;
    }
    uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<uint8_t>(p_[i_ + k]) & 0x3F);
    i_ += static_cast<size_t>(n);
    return cp;
  }

  ExprId ParseAlt(int depth) {
    std::vector<ExprId> options{ParseSeq(depth)};
    while (error_.ok() && !AtEnd() && Peek() == '|') {
      ++i_;
      options.push_back(ParseSeq(depth));
    }
    return g_->Alt(std::move(options));
  }

  ExprId ParseSeq(int depth) {
    std::vector<ExprId> parts;
    if (depth == 0 && !AtEnd() && Peek() == '^') ++i_;  // full match anyway
    while (error_.ok() && !AtEnd() && Peek() != '|' && Peek() != ')') {
      if (Peek() == '$') {
        ++i_;
        if (depth == 0 && (AtEnd() || Peek() == '|')) break;
        Fail("'$' inside the pattern is not supported");
        break;
      }
      if (Peek() == '^') {
        Fail("'^' inside the pattern is not supported");
        break;
      }
      const size_t atom_start = i_;
      ExprId atom = ParseAtom(depth);
      if (!error_.ok()) break;
      atom = ParseQuantifiers(atom, atom_start);
      parts.push_back(atom);
    }
    if (parts.empty()) return g_->Empty();
    return g_->Seq(std::move(parts));
  }

  bool ParseCount(int32_t* out) {
    if (AtEnd() || Peek() < '0' || Peek() > '9') return false;
    int64_t v = 0;
    while (!AtEnd() && Peek() >= '0' && Peek() <= '9') {
      v = v * 10 + (Peek() - '0');
      if (v > 1000000) v = 1000000;
      ++i_;
    }
    *out = static_cast<int32_t>(v);
    return true;
  }

  ExprId ParseQuantifiers(ExprId atom, size_t atom_start) {
    for (;;) {
      if (AtEnd()) return atom;
      int32_t min = 0, max = -1;
      const char c = Peek();
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        ++i_;
        min = 1;
      } else if (c == '?') {
        ++i_;
        max = 1;
      } else if (c == '{') {
        const size_t save = i_;
        ++i_;
        if (!ParseCount(&min)) {
          i_ = save;  // a literal '{'
          return atom;
        }
        max = min;
        if (!AtEnd() && Peek() == ',') {
          ++i_;
          max = -1;
          ParseCount(&max);
        }
        if (AtEnd() || Peek() != '}') {
          i_ = save;
          return atom;
        }
        ++i_;
        if (min > kMaxCount || max > kMaxCount) {
          Fail(absl::StrCat("repetition counts above ", kMaxCount, " are not supported"));
          return atom;
        }
        if (max >= 0 && max < min) {
          Fail("repetition {n,m} with m < n");
          return atom;
        }
      } else {
        return atom;
      }
      if (atom_start == i_) Fail("quantifier without an expression");
      if (!AtEnd() && (Peek() == '?' || Peek() == '+')) ++i_;  // lazy / possessive: same language
      atom = g_->Repeat(atom, min, max);
    }
  }

  ExprId ParseAtom(int depth) {
    const char c = Peek();
    if (c == '(') {
      ++i_;
      if (!AtEnd() && Peek() == '?') {
        ++i_;
        if (AtEnd()) {
          Fail("unterminated group");
          return g_->Empty();
        }
        const char k = Peek();
        if (k == ':') {
          ++i_;
        } else if (k == 'P' ||
                   (k == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!')) {
          if (k == 'P') ++i_;
          if (AtEnd() || Peek() != '<') {
            Fail("unsupported group syntax");
            return g_->Empty();
          }
          while (!AtEnd() && Peek() != '>') ++i_;
          if (AtEnd()) {
            Fail("unterminated group name");
            return g_->Empty();
          }
          ++i_;
        } else if (k == '=' || k == '!' || k == '<') {
          Fail("lookaround assertions are not supported");
          return g_->Empty();
        } else {
          Fail("inline flags and other (?...) groups are not supported");
          return g_->Empty();
        }
      }
      ExprId inner = ParseAlt(depth + 1);
      if (!error_.ok()) return inner;
      if (AtEnd() || Peek() != ')') {
        Fail("missing ')'");
        return inner;
      }
      ++i_;
      return inner;
    }
    if (c == '[') return ParseClass();
    if (c == '.') {
      ++i_;
      return Chars(NegateRanges({{'\n', '\n'}}));
    }
    if (c == '\\') {
      CodepointRanges set;
      ParseEscape(/*in_class=*/false, &set);
      return Chars(set);
    }
    if (c == '*' || c == '+' || c == '?') {
      Fail("quantifier without an expression");
      return g_->Empty();
    }
    const uint32_t cp = NextCodepoint();
    return Chars({{cp, cp}});
  }

  // An escape at p_[i_] == '\\': appends the characters it stands for.
  void ParseEscape(bool in_class, CodepointRanges* set) {
    ++i_;
    if (AtEnd()) {
      Fail("trailing backslash");
      return;
    }
    const char c = Peek();
    auto add = [&](const CodepointRanges& r) { set->insert(set->end(), r.begin(), r.end()); };
    auto one = [&](uint32_t cp) { set->emplace_back(cp, cp); };
    ++i_;
    switch (c) {
      case 'd':
        return add(Digits());
      case 'D':
        return add(NegateRanges(Digits()));
      case 'w':
        return add(Word());
      case 'W':
        return add(NegateRanges(Word()));
      case 's':
        return add(Space());
      case 'S':
        return add(NegateRanges(Space()));
      case 't':
        return one('\t');
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case '0':
        return one(0);
      case 'x':
      case 'u': {
        uint32_t v = 0;
        if (c == 'u' && !AtEnd() && Peek() == '{') {
          ++i_;
          int n = 0;
          while (!AtEnd() && HexValue(Peek()) >= 0 && n < 6) {
            v = v * 16 + static_cast<uint32_t>(HexValue(Peek()));
            ++i_;
            ++n;
          }
          if (n == 0 || AtEnd() || Peek() != '}' || v > 0x10FFFF) {
            Fail("bad \\u{...} escape");
            return;
          }
          ++i_;
          return one(v);
        }
        const int n = c == 'x' ? 2 : 4;
        for (int k = 0; k < n; ++k) {
          if (AtEnd() || HexValue(Peek()) < 0) {
            Fail(absl::StrCat("bad \\", std::string(1, c), " escape"));
            return;
          }
          v = v * 16 + static_cast<uint32_t>(HexValue(Peek()));
          ++i_;
        }
        return one(v);
      }
      case 'b':
        if (in_class) return one('\b');
        Fail("word boundaries (\\b) are not supported");
        return;
      case 'B':
      case 'A':
      case 'z':
      case 'Z':
      case 'G':
        Fail(absl::StrCat("the anchor \\", std::string(1, c), " is not supported"));
        return;
      case 'p':
      case 'P':
        Fail("Unicode property classes (\\p{...}) are not supported");
        return;
      default:
        break;
    }
    if (c >= '1' && c <= '9') {
      Fail("backreferences are not supported");
      return;
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
      Fail(absl::StrCat("unknown escape \\", std::string(1, c)));
      return;
    }
    --i_;
    const uint32_t cp = NextCodepoint();  // an escaped punctuation character (or any other)
    one(cp);
  }

  ExprId ParseClass() {
    ++i_;  // '['
    bool negate = false;
    if (!AtEnd() && Peek() == '^') {
      negate = true;
      ++i_;
    }
    CodepointRanges set;
    bool first = true;
    while (error_.ok()) {
      if (AtEnd()) {
        Fail("missing ']'");
        break;
      }
      if (Peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      if (Peek() == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
        Fail("POSIX classes ([:alpha:]) are not supported");
        break;
      }
      CodepointRanges item;
      if (Peek() == '\\') {
        ParseEscape(/*in_class=*/true, &item);
      } else {
        const uint32_t cp = NextCodepoint();
        item.emplace_back(cp, cp);
      }
      // A range a-z (a '-' before ']' is literal).
      if (item.size() == 1 && item[0].first == item[0].second && !AtEnd() && Peek() == '-' &&
          i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        CodepointRanges hi;
        if (Peek() == '\\') {
          ParseEscape(/*in_class=*/true, &hi);
        } else {
          const uint32_t cp = NextCodepoint();
          hi.emplace_back(cp, cp);
        }
        if (hi.size() != 1 || hi[0].first != hi[0].second || hi[0].first < item[0].first) {
          Fail("bad character range in a class");
          break;
        }
        item[0].second = hi[0].first;
      }
      set.insert(set.end(), item.begin(), item.end());
    }
    set = NormalizeRanges(std::move(set));
    if (negate) set = NegateRanges(set);
    return Chars(set);
  }

  const std::string_view p_;
  const RegexContext ctx_;
  Grammar* g_;
  size_t i_ = 0;
  absl::Status error_;
};

}  // namespace

ExprId JsonStringCharacters(const CodepointRanges& set, Grammar* g) {
  const CodepointRanges normalized = NormalizeRanges(set);
  auto contains = [&](uint32_t cp) {
    for (const auto& [lo, hi] : normalized) {
      if (cp >= lo && cp <= hi) return true;
    }
    return false;
  };
  // Raw: everything but '"', '\' and the controls.
  CodepointRanges raw;
  for (auto [lo, hi] : normalized) {
    if (hi < 0x20) continue;
    lo = std::max<uint32_t>(lo, 0x20);
    for (uint32_t special : {static_cast<uint32_t>('"'), static_cast<uint32_t>('\\')}) {
      if (lo <= special && special <= hi) {
        if (lo < special) raw.emplace_back(lo, special - 1);
        lo = special + 1;
      }
    }
    if (lo <= hi) raw.emplace_back(lo, hi);
  }
  std::vector<ExprId> options;
  if (!raw.empty()) options.push_back(g->Codepoints(raw));
  if (contains('"')) options.push_back(g->Literal("\\\""));
  if (contains('\\')) options.push_back(g->Literal("\\\\"));
  for (uint32_t c = 0; c < 0x20; ++c) {
    if (!contains(c)) continue;
    switch (c) {
      case '\b':
        options.push_back(g->Literal("\\b"));
        break;
      case '\f':
        options.push_back(g->Literal("\\f"));
        break;
      case '\n':
        options.push_back(g->Literal("\\n"));
        break;
      case '\r':
        options.push_back(g->Literal("\\r"));
        break;
      case '\t':
        options.push_back(g->Literal("\\t"));
        break;
      default:
        options.push_back(g->Literal(absl::StrFormat("\\u%04x", c)));
    }
  }
  if (options.empty()) return g->Bytes(ByteSet());
  return g->Alt(std::move(options));
}

absl::StatusOr<ExprId> RegexToExpr(std::string_view pattern, RegexContext context, Grammar* g) {
  return RegexParser(pattern, context, g).Parse();
}

}  // namespace moe::grammar
