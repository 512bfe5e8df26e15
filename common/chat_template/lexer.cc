#include "common/chat_template/lexer.h"

#include <cerrno>
#include <cstdlib>
#include <utility>

#include "absl/status/status.h"
#include "common/chat_template/value.h"
#include "common/tokenizer/unicode.h"

namespace moe::chat_template::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

std::string NormalizeNewlines(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < in.size() && in[i + 1] == '\n') ++i;
    } else {
      out.push_back(in[i]);
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeNewlines(source)) {
    // keep_trailing_newline=False.
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t tag = FindTag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const size_t text_pos = pos_;
      if (tag == src_.size()) {
        EmitText(std::move(text), text_pos);
        break;
      }
      const char type = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        size_t end = text.size();
        while (end > 0 && IsSpace(text[end - 1])) --end;
        text.resize(end);
      } else if (sign != '+' && type != '{') {
        // lstrip_blocks: drop spaces/tabs between the line start and a block or comment tag.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          bool only_ws = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && only_ws; ++i) {
            only_ws = text[i] == ' ' || text[i] == '\t' || text[i] == '\f' || text[i] == '\v';
          }
          if (only_ws) text.resize(l_pos);
        }
      }
      EmitText(std::move(text), text_pos);
      pos_ = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      absl::Status s;
      if (type == '#') {
        s = LexComment(tag, &line_starting);
      } else if (type == '%' && TryRaw(tag, &line_starting, &s)) {
        // handled
      } else {
        s = LexTag(tag, type == '{', &line_starting);
      }
      if (!s.ok()) return s;
    }
    Token eof;
    eof.kind = TokenKind::kEof;
    SetPos(&eof, src_.size());
    tokens_.push_back(std::move(eof));
    return std::move(tokens_);
  }

 private:
  size_t FindTag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return src_.size();
  }

  void SetPos(Token* t, size_t pos) {
    // Advance the line counter incrementally: positions are requested in increasing order.
    if (pos < line_scan_pos_) {
      line_scan_pos_ = 0;
      line_ = 1;
      line_start_ = 0;
    }
    for (; line_scan_pos_ < pos && line_scan_pos_ < src_.size(); ++line_scan_pos_) {
      if (src_[line_scan_pos_] == '\n') {
        ++line_;
        line_start_ = line_scan_pos_ + 1;
      }
    }
    t->line = line_;
    t->col = static_cast<int>(pos - line_start_) + 1;
  }

  absl::Status ErrorAt(size_t pos, std::string_view what) {
    Token t;
    SetPos(&t, pos);
    return absl::InvalidArgumentError(
        Cat("template syntax error at line ", t.line, ", column ", t.col, ": ", what));
  }

  void EmitText(std::string text, size_t pos) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    SetPos(&t, pos);
    tokens_.push_back(std::move(t));
  }

  void Emit(TokenKind kind, size_t pos, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    SetPos(&t, pos);
    tokens_.push_back(std::move(t));
  }

  void SkipWhitespace() {
    while (pos_ < src_.size() && IsSpace(src_[pos_])) ++pos_;
  }

  // After a block or comment end: trim_blocks drops one newline; `-` drops all whitespace.
  void AfterBlockEnd(char sign, bool* line_starting) {
    *line_starting = false;
    if (sign == '-') {
      SkipWhitespace();
    } else if (sign != '+' && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
      *line_starting = true;
    }
  }

  absl::Status LexComment(size_t tag, bool* line_starting) {
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return ErrorAt(tag, "unterminated comment");
    const char sign =
        end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : '\0';
    pos_ = end + 2;
    AfterBlockEnd(sign, line_starting);
    return absl::OkStatus();
  }

  // `{% raw %}...{% endraw %}`: everything between is text.
  bool TryRaw(size_t tag, bool* line_starting, absl::Status* status) {
    size_t p = pos_;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && IsNameChar(src_[p + 3]))) {
      return false;
    }
    p += 3;
    while (p < src_.size() && IsSpace(src_[p])) ++p;
    char open_sign = '\0';
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) open_sign = src_[p++];
    if (src_.compare(p, 2, "%}") != 0) {
      *status = ErrorAt(tag, "malformed raw tag");
      return true;
    }
    pos_ = p + 2;
    AfterBlockEnd(open_sign, line_starting);
    for (size_t search = pos_;;) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) {
        *status = ErrorAt(tag, "unterminated raw block");
        return true;
      }
      size_t q = open + 2;
      const bool strip_before = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) {
        search = open + 2;
        continue;
      }
      q += 6;
      while (q < src_.size() && IsSpace(src_[q])) ++q;
      char close_sign = '\0';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) close_sign = src_[q++];
      if (src_.compare(q, 2, "%}") != 0) {
        search = open + 2;
        continue;
      }
      std::string text = src_.substr(pos_, open - pos_);
      if (strip_before) {
        while (!text.empty() && IsSpace(text.back())) text.pop_back();
      }
      EmitText(std::move(text), pos_);
      pos_ = q + 2;
      AfterBlockEnd(close_sign, line_starting);
      *status = absl::OkStatus();
      return true;
    }
  }

  absl::Status LexTag(size_t tag, bool is_var, bool* line_starting) {
    Emit(is_var ? TokenKind::kVarBegin : TokenKind::kBlockBegin, tag);
    const char close = is_var ? '}' : '%';
    int depth = 0;  // open brackets: a `}}` inside a dict literal does not end the tag
    while (true) {
      SkipWhitespace();
      if (pos_ >= src_.size()) {
        return ErrorAt(
            tag, is_var ? "unterminated '{{' (missing '}}')" : "unterminated '{%' (missing '%}')");
      }
      const char c = src_[pos_];
      if (depth == 0) {
        char sign = '\0';
        size_t p = pos_;
        if ((c == '-' || (c == '+' && !is_var)) && p + 2 < src_.size() + 0 &&
            src_[p + 1] == close && src_[p + 2] == '}') {
          sign = c;
          ++p;
        }
        if (p + 1 < src_.size() && src_[p] == close && src_[p + 1] == '}') {
          Emit(is_var ? TokenKind::kVarEnd : TokenKind::kBlockEnd, pos_);
          pos_ = p + 2;
          if (is_var) {
            *line_starting = false;
            if (sign == '-') SkipWhitespace();
          } else {
            AfterBlockEnd(sign, line_starting);
          }
          return absl::OkStatus();
        }
      }
      if (absl::Status s = LexExprToken(&depth); !s.ok()) return s;
    }
  }

  absl::Status LexExprToken(int* depth) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (IsNameStart(c)) {
      while (pos_ < src_.size() && IsNameChar(src_[pos_])) ++pos_;
      Emit(TokenKind::kName, start, src_.substr(start, pos_ - start));
      return absl::OkStatus();
    }
    if (IsDigit(c)) return LexNumber(start);
    if (c == '\'' || c == '"') return LexString(start);
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
    for (std::string_view op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        pos_ += 2;
        Emit(TokenKind::kOp, start, std::string(op));
        return absl::OkStatus();
      }
    }
    static constexpr std::string_view kOne = "+-*/%~<>=()[]{},.:|";
    if (kOne.find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') ++*depth;
      if (c == ')' || c == ']' || c == '}') {
        if (*depth == 0) return ErrorAt(start, Cat("unexpected '", std::string(1, c), "'"));
        --*depth;
      }
      ++pos_;
      Emit(TokenKind::kOp, start, std::string(1, c));
      return absl::OkStatus();
    }
    return ErrorAt(start, Cat("unexpected character '", std::string(1, c), "'"));
  }

  absl::Status LexNumber(size_t start) {
    std::string digits;
    auto take_digits = [&] {
      while (pos_ < src_.size() && (IsDigit(src_[pos_]) || src_[pos_] == '_')) {
        if (src_[pos_] != '_') digits.push_back(src_[pos_]);
        ++pos_;
      }
    };
    take_digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' && IsDigit(src_[pos_ + 1])) {
      is_float = true;
      digits.push_back('.');
      ++pos_;
      take_digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && IsDigit(src_[p])) {
        is_float = true;
        digits.append(src_, pos_, p - pos_);
        pos_ = p;
        take_digits();
      }
    }
    Token t;
    SetPos(&t, start);
    errno = 0;
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      t.int_value = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) return ErrorAt(start, "integer literal out of range");
    }
    tokens_.push_back(std::move(t));
    return absl::OkStatus();
  }

  // Python string-literal escapes, as Jinja decodes them ("unicode-escape"); an unknown escape
  // keeps its backslash.
  absl::Status LexString(size_t start) {
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) return ErrorAt(start, "unterminated string literal");
      const char c = src_[pos_++];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (pos_ >= src_.size()) return ErrorAt(start, "unterminated string literal");
      const char e = src_[pos_++];
      switch (e) {
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'v':
          out.push_back('\v');
          break;
        case 'a':
          out.push_back('\a');
          break;
        case '0':
        case '1':
        case '2':
        case '3':
        case '4':
        case '5':
        case '6':
        case '7': {
          uint32_t v = e - '0';
          for (int k = 0; k < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7';
               ++k) {
            v = v * 8 + (src_[pos_++] - '0');
          }
          tokenizer::AppendUtf8(v, &out);
          break;
        }
        case '\\':
        case '\'':
        case '"':
          out.push_back(e);
          break;
        case '\n':
          break;  // line continuation
        case 'x':
        case 'u':
        case 'U': {
          const int len = e == 'x' ? 2 : (e == 'u' ? 4 : 8);
          if (pos_ + len > src_.size()) return ErrorAt(pos_ - 2, "truncated \\x/\\u escape");
          uint32_t v = 0;
          for (int k = 0; k < len; ++k) {
            const char h = src_[pos_ + k];
            int d;
            if (h >= '0' && h <= '9') {
              d = h - '0';
            } else if (h >= 'a' && h <= 'f') {
              d = h - 'a' + 10;
            } else if (h >= 'A' && h <= 'F') {
              d = h - 'A' + 10;
            } else {
              return ErrorAt(pos_ - 2, "invalid \\x/\\u escape");
            }
            v = v * 16 + d;
          }
          if (v > 0x10FFFF) return ErrorAt(pos_ - 2, "escape out of Unicode range");
          pos_ += len;
          tokenizer::AppendUtf8(v, &out);
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
      }
    }
    Emit(TokenKind::kString, start, std::move(out));
    return absl::OkStatus();
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t line_scan_pos_ = 0;
  int line_ = 1;
  size_t line_start_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

}  // namespace moe::chat_template::jinja
