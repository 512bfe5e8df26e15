// Lexer of the chat-template interpreter: template source -> tokens.
//
// Whitespace handling is Jinja's with the settings Hugging Face transformers uses for chat
// templates: trim_blocks=True (the first newline after a block or comment tag is dropped),
// lstrip_blocks=True (spaces and tabs from the start of a line to a block or comment tag are
// dropped), keep_trailing_newline=False (one trailing newline of the template is dropped),
// `-` inside a tag strips all whitespace on that side, `+` disables lstrip for that tag.
// Newlines are normalised to "\n" as Jinja does. Comments vanish; `{% raw %}` becomes text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::chat_template::jinja {

enum class TokenKind {
  kText,        // literal template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal, escapes already decoded
  kInt,
  kFloat,
  kOp,  // operator or punctuation, text holds it ("+", "//", "(", ...)
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;  // kText, kName, kString, kOp
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;  // 1-based, in the template source
  int col = 1;   // 1-based, in bytes
};

// Returns the token stream ending with kEof, or kInvalidArgument naming line:column for an
// unterminated tag, comment or string, or an unexpected character.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace moe::chat_template::jinja
