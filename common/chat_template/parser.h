// Parser of the chat-template interpreter: tokens -> syntax tree, with Jinja's grammar and
// operator precedence (lowest first): `x if c else y`, or, and, not, comparisons/in/not in,
// + -, ~, * / // %, **, unary - +, then postfix (.attr, [item], [a:b:c], call), filters `|f`
// and tests `is [not] t`.
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (incl. ns.attr and
// block set), macro, call, filter blocks, break, continue, and transformers' generation tags
// (ignored: they only mark assistant spans).
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "common/chat_template/ast.h"
#include "common/chat_template/lexer.h"

namespace moe::chat_template::jinja {

// Returns the statement list, or kInvalidArgument naming line:column for any syntax error
// (unknown tag, unclosed block, bad expression, nesting deeper than a fixed limit).
absl::StatusOr<StmtList> Parse(const std::vector<Token>& tokens);

}  // namespace moe::chat_template::jinja
