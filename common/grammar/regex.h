// Regular expressions (the common subset of JSON Schema `pattern`, Python and JavaScript) as
// grammar expressions, with full-match semantics: the whole output (or the whole JSON string
// value) must match. A leading ^ and a trailing $ are accepted and change nothing.
//
// Supported: literals (UTF-8), `.` (any character but \n), classes `[a-z]`, `[^...]` with escapes,
// `\d \D \w \W \s \S`, `\t \n \r \f \v \0 \xHH \uHHHH \u{H..}`, escaped punctuation, groups
// `(...)`, `(?:...)`, `(?<name>...)`, `(?P<name>...)`, alternation, and the quantifiers
// `* + ? {n} {n,} {n,m}` (lazy and possessive suffixes allowed: the language is the same).
// Refused with kInvalidArgument naming the feature: backreferences, lookaround, word boundaries,
// anchors inside the pattern, inline flags, Unicode properties, and counts above 1000.
//
// Thread-safety: pure functions.
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "common/grammar/grammar.h"

namespace moe::grammar {

enum class RegexContext {
  kRaw,         // the pattern's characters as UTF-8 text
  kJsonString,  // inside a JSON string literal: '"', '\' and control characters are escaped
};

// Adds the expression of `pattern` to `g`. Errors name the problem and its offset.
absl::StatusOr<ExprId> RegexToExpr(std::string_view pattern, RegexContext context, Grammar* g);

// One character of `set` as it appears inside a JSON string: raw UTF-8, except '"' -> \", '\' ->
// \\, and control characters U+0000..U+001F -> \b \f \n \r \t or \u00XX.
ExprId JsonStringCharacters(const CodepointRanges& set, Grammar* g);

}  // namespace moe::grammar
