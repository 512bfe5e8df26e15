// Syntax tree of the chat-template interpreter (built by parser.h, walked by eval.h). Plain
// structs; a tree is immutable after parsing and shared by renders.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/chat_template/value.h"

namespace moe::chat_template::jinja {

// Name of the kLiteral that stands for the rendered body in `{% filter %}` and block `set`.
inline constexpr char kPlaceholderName[] = "<body>";

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // [children...]
    kTuple,    // (children...), also bare `a, b` targets
    kDict,     // {children[0]: children[1], ...} (pairs)
    kGetAttr,  // children[0].name
    kGetItem,  // children[0][children[1]]
    kSlice,    // children[0][children[1]:children[2]:children[3]] (null child = omitted)
    kCall,     // children[0](children[1..], kwargs)
    kFilter,   // children[0] | name(children[1..], kwargs)
    kTest,     // children[0] is [not] name(children[1..])
    kUnary,    // op children[0]: "not", "-", "+"
    kBinary,   // children[0] op children[1]: + - * / // % ** ~ == != < <= > >= in "not in"
    kAnd,      // children[0] and children[1]
    kOr,
    kCond,  // children[0] if children[1] else children[2] (children[2] may be null)
  };
  Kind kind = Kind::kLiteral;
  int line = 0;
  int col = 0;
  Value literal;
  std::string name;      // name / attribute / filter / test / operator
  bool negated = false;  // kTest: `is not`
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;  // kCall, kFilter
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches: (cond, body)...; else_body
    kFor,          // for target in iter [if cond] body [else else_body]
    kSet,          // set target = expr   (target: name, tuple of names, or ns.attr)
    kSetBlock,     // set name %}body{% endset  (optional filter in expr)
    kMacro,        // macro name(params) body
    kCallBlock,    // call(caller_params) expr %}body{% endcall
    kFilterBlock,  // filter name(args) %}body{% endfilter (expr is the filter applied to a dummy)
    kBreak,
    kContinue,
  };
  Kind kind = Kind::kText;
  int line = 0;
  int col = 0;
  std::string text;  // kText; kMacro / kSetBlock: the name
  ExprPtr target;    // kFor, kSet
  ExprPtr expr;      // kOutput, kSet value, kFor iterable, kCallBlock call
  ExprPtr cond;      // kFor filter condition
  std::vector<std::pair<ExprPtr, StmtList>> branches;  // kIf
  StmtList body;                   // kFor, kSetBlock, kMacro, kCallBlock, kFilterBlock
  StmtList else_body;              // kIf, kFor
  std::vector<MacroParam> params;  // kMacro, kCallBlock (caller parameters)
};

}  // namespace moe::chat_template::jinja
