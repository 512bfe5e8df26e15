#include "common/chat_template/parser.h"

#include <initializer_list>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "common/base/status_macros.h"
#include "common/chat_template/builtins.h"

namespace moe::chat_template::jinja {
namespace {

// Bounds recursion so hostile templates ("((((((...") fail cleanly instead of overflowing.
constexpr int kMaxDepth = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  absl::StatusOr<StmtList> Run() {
    StmtList body;
    std::string end;
    RETURN_IF_ERROR(ParseBody({}, &body, &end));
    return body;
  }

 private:
  const Token& Cur() const { return toks_[pos_]; }
  const Token& Peek(size_t ahead = 1) const {
    return toks_[std::min(pos_ + ahead, toks_.size() - 1)];
  }
  void Advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool IsOp(std::string_view op) const { return Cur().kind == TokenKind::kOp && Cur().text == op; }
  bool IsName(std::string_view name) const {
    return Cur().kind == TokenKind::kName && Cur().text == name;
  }

  absl::Status Error(const Token& at, std::string_view what) const {
    return absl::InvalidArgumentError(
        Cat("template syntax error at line ", at.line, ", column ", at.col, ": ", what));
  }
  static std::string Describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kVarEnd:
        return "'}}'";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kText:
        return "template text";
      case TokenKind::kString:
        return "string literal";
      case TokenKind::kInt:
      case TokenKind::kFloat:
        return "number";
      default:
        return "'" + t.text + "'";
    }
  }
  absl::Status Unexpected(std::string_view expected) const {
    return Error(Cur(), Cat("expected ", expected, ", got ", Describe(Cur())));
  }
  absl::Status ExpectOp(std::string_view op) {
    if (!IsOp(op)) return Unexpected(Cat("'", op, "'"));
    Advance();
    return absl::OkStatus();
  }
  absl::Status ExpectBlockEnd() {
    if (Cur().kind != TokenKind::kBlockEnd) return Unexpected("'%}'");
    Advance();
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> ExpectName() {
    if (Cur().kind != TokenKind::kName) return Unexpected("a name");
    std::string n = Cur().text;
    Advance();
    return n;
  }

  ExprPtr NewExpr(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->col = at.col;
    return e;
  }
  std::unique_ptr<Stmt> NewStmt(Stmt::Kind kind, const Token& at) {
    auto s = std::make_unique<Stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  // Parses statements until a block tag named in `ends` (its name is consumed into *end; the
  // rest of that tag is left to the caller). With no `ends`, parses to the end of input.
  absl::Status ParseBody(std::initializer_list<std::string_view> ends, StmtList* out,
                         std::string* end) {
    if (++depth_ > kMaxDepth) return Error(Cur(), "blocks nested too deeply");
    while (true) {
      const Token& t = Cur();
      if (t.kind == TokenKind::kEof) {
        if (ends.size() == 0) break;
        return Error(t,
                     Cat("unexpected end of template, expected '{% ", *(ends.end() - 1), " %}'"));
      }
      if (t.kind == TokenKind::kText) {
        auto s = NewStmt(Stmt::Kind::kText, t);
        s->text = t.text;
        out->push_back(std::move(s));
        Advance();
        continue;
      }
      if (t.kind == TokenKind::kVarBegin) {
        auto s = NewStmt(Stmt::Kind::kOutput, t);
        Advance();
        ASSIGN_OR_RETURN(s->expr, ParseTuple(/*allow_cond=*/true));
        if (Cur().kind != TokenKind::kVarEnd) return Unexpected("'}}'");
        Advance();
        out->push_back(std::move(s));
        continue;
      }
      if (t.kind != TokenKind::kBlockBegin) return Unexpected("template text or a tag");
      Advance();
      if (Cur().kind != TokenKind::kName) return Unexpected("a statement name");
      const std::string name = Cur().text;
      for (std::string_view e : ends) {
        if (name == e) {
          *end = name;
          Advance();
          --depth_;
          return absl::OkStatus();
        }
      }
      ASSIGN_OR_RETURN(std::unique_ptr<Stmt> stmt, ParseStatement(t));
      if (stmt != nullptr) out->push_back(std::move(stmt));
    }
    --depth_;
    return absl::OkStatus();
  }

  // Current token is the statement name, just after `{%`.
  absl::StatusOr<std::unique_ptr<Stmt>> ParseStatement(const Token& open) {
    const Token& name_tok = Cur();
    const std::string name = name_tok.text;
    if (name == "if") return ParseIf(open);
    if (name == "for") return ParseFor(open);
    if (name == "set") return ParseSet(open);
    if (name == "macro") return ParseMacro(open);
    if (name == "call") return ParseCallBlock(open);
    if (name == "filter") return ParseFilterBlock(open);
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Error(name_tok, Cat("'", name, "' outside a loop"));
      auto s = NewStmt(name == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, open);
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (name == "generation" || name == "endgeneration") {
      Advance();
      RETURN_IF_ERROR(ExpectBlockEnd());
      return std::unique_ptr<Stmt>();
    }
    return Error(name_tok, Cat("unknown or unexpected tag '", name, "'"));
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseIf(const Token& open) {
    auto s = NewStmt(Stmt::Kind::kIf, open);
    Advance();  // if
    while (true) {
      ASSIGN_OR_RETURN(ExprPtr cond, ParseTuple(/*allow_cond=*/true));
      RETURN_IF_ERROR(ExpectBlockEnd());
      StmtList body;
      std::string end;
      RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &body, &end));
      s->branches.emplace_back(std::move(cond), std::move(body));
      if (end == "elif") continue;
      if (end == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"endif"}, &s->else_body, &end));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFor(const Token& open) {
    auto s = NewStmt(Stmt::Kind::kFor, open);
    Advance();  // for
    ASSIGN_OR_RETURN(s->target, ParseAssignTarget(/*allow_attr=*/false));
    if (!IsName("in")) return Unexpected("'in'");
    Advance();
    ASSIGN_OR_RETURN(s->expr, ParseTuple(/*allow_cond=*/false));
    if (IsName("if")) {
      Advance();
      ASSIGN_OR_RETURN(s->cond, ParseExpression(true));
    }
    if (IsName("recursive")) return Error(Cur(), "recursive loops are not supported");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    ++loop_depth_;
    RETURN_IF_ERROR(ParseBody({"else", "endfor"}, &s->body, &end));
    --loop_depth_;
    if (end == "else") {
      RETURN_IF_ERROR(ExpectBlockEnd());
      RETURN_IF_ERROR(ParseBody({"endfor"}, &s->else_body, &end));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // name | name.attr | name, name, ...
  absl::StatusOr<ExprPtr> ParseAssignTarget(bool allow_attr) {
    const Token& start = Cur();
    std::vector<ExprPtr> names;
    while (true) {
      const Token& at = Cur();
      ASSIGN_OR_RETURN(std::string n, ExpectName());
      ExprPtr e = NewExpr(Expr::Kind::kName, at);
      e->name = std::move(n);
      if (allow_attr && IsOp(".")) {
        Advance();
        ExprPtr attr = NewExpr(Expr::Kind::kGetAttr, at);
        ASSIGN_OR_RETURN(attr->name, ExpectName());
        attr->children.push_back(std::move(e));
        e = std::move(attr);
      }
      names.push_back(std::move(e));
      if (!IsOp(",")) break;
      Advance();
    }
    if (names.size() == 1) return std::move(names[0]);
    ExprPtr tuple = NewExpr(Expr::Kind::kTuple, start);
    for (auto& n : names) {
      if (n->kind != Expr::Kind::kName) return Error(start, "cannot unpack into an attribute");
      tuple->children.push_back(std::move(n));
    }
    return tuple;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseSet(const Token& open) {
    Advance();  // set
    ASSIGN_OR_RETURN(ExprPtr target, ParseAssignTarget(/*allow_attr=*/true));
    if (IsOp("=")) {
      auto s = NewStmt(Stmt::Kind::kSet, open);
      Advance();
      s->target = std::move(target);
      ASSIGN_OR_RETURN(s->expr, ParseTuple(/*allow_cond=*/true));
      RETURN_IF_ERROR(ExpectBlockEnd());
      return s;
    }
    if (target->kind != Expr::Kind::kName) return Unexpected("'='");
    auto s = NewStmt(Stmt::Kind::kSetBlock, open);
    s->text = target->name;
    if (IsOp("|")) {
      ExprPtr placeholder = NewExpr(Expr::Kind::kLiteral, Cur());
      placeholder->name = kPlaceholderName;
      ASSIGN_OR_RETURN(s->expr, ParseFilters(std::move(placeholder)));
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    RETURN_IF_ERROR(ParseBody({"endset"}, &s->body, &end));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::Status ParseParams(std::vector<MacroParam>* params) {
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      MacroParam p;
      ASSIGN_OR_RETURN(p.name, ExpectName());
      if (IsOp("=")) {
        Advance();
        ASSIGN_OR_RETURN(p.default_value, ParseExpression(true));
      }
      params->push_back(std::move(p));
      if (!IsOp(",")) break;
      Advance();
    }
    return ExpectOp(")");
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseMacro(const Token& open) {
    auto s = NewStmt(Stmt::Kind::kMacro, open);
    Advance();  // macro
    ASSIGN_OR_RETURN(s->text, ExpectName());
    RETURN_IF_ERROR(ParseParams(&s->params));
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    RETURN_IF_ERROR(ParseBody({"endmacro"}, &s->body, &end));
    loop_depth_ = saved_loop_depth;
    if (Cur().kind == TokenKind::kName) Advance();  // `{% endmacro name %}`
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseCallBlock(const Token& open) {
    auto s = NewStmt(Stmt::Kind::kCallBlock, open);
    Advance();  // call
    if (IsOp("(")) RETURN_IF_ERROR(ParseParams(&s->params));
    ASSIGN_OR_RETURN(s->expr, ParseExpression(true));
    if (s->expr->kind != Expr::Kind::kCall) return Error(open, "expected a call in 'call' tag");
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    RETURN_IF_ERROR(ParseBody({"endcall"}, &s->body, &end));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  absl::StatusOr<std::unique_ptr<Stmt>> ParseFilterBlock(const Token& open) {
    auto s = NewStmt(Stmt::Kind::kFilterBlock, open);
    // `{% filter upper %}`: parsed as if it were `_ | upper`; the body replaces `_`.
    Advance();  // filter
    const Token& at = Cur();
    ExprPtr f = NewExpr(Expr::Kind::kFilter, at);
    ASSIGN_OR_RETURN(f->name, ExpectName());
    if (!IsKnownFilter(f->name)) return Error(at, Cat("no filter named '", f->name, "'"));
    f->children.push_back(NewExpr(Expr::Kind::kLiteral, at));
    f->children.back()->name = kPlaceholderName;
    if (IsOp("(")) {
      ASSIGN_OR_RETURN(f, ParseCall(std::move(f), at, Expr::Kind::kFilter));
    }
    ASSIGN_OR_RETURN(s->expr, ParseFilters(std::move(f)));
    RETURN_IF_ERROR(ExpectBlockEnd());
    std::string end;
    RETURN_IF_ERROR(ParseBody({"endfilter"}, &s->body, &end));
    RETURN_IF_ERROR(ExpectBlockEnd());
    return s;
  }

  // ---- expressions ----

  // expr [, expr ...] -> tuple when a comma appears.
  absl::StatusOr<ExprPtr> ParseTuple(bool allow_cond) {
    const Token& start = Cur();
    ASSIGN_OR_RETURN(ExprPtr first, ParseExpression(allow_cond));
    if (!IsOp(",")) return first;
    ExprPtr tuple = NewExpr(Expr::Kind::kTuple, start);
    tuple->children.push_back(std::move(first));
    while (IsOp(",")) {
      Advance();
      if (Cur().kind == TokenKind::kBlockEnd || Cur().kind == TokenKind::kVarEnd || IsName("if")) {
        break;
      }
      ASSIGN_OR_RETURN(ExprPtr next, ParseExpression(allow_cond));
      tuple->children.push_back(std::move(next));
    }
    return tuple;
  }

  absl::StatusOr<ExprPtr> ParseExpression(bool allow_cond) {
    if (++depth_ > kMaxDepth) return Error(Cur(), "expression nested too deeply");
    absl::StatusOr<ExprPtr> r = allow_cond ? ParseCond() : ParseOr();
    --depth_;
    return r;
  }

  absl::StatusOr<ExprPtr> ParseCond() {
    ASSIGN_OR_RETURN(ExprPtr expr, ParseOr());
    while (IsName("if")) {
      const Token& at = Cur();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr cond, ParseOr());
      ExprPtr node = NewExpr(Expr::Kind::kCond, at);
      node->children.push_back(std::move(expr));
      node->children.push_back(std::move(cond));
      if (IsName("else")) {
        Advance();
        ASSIGN_OR_RETURN(ExprPtr other, ParseCond());
        node->children.push_back(std::move(other));
      } else {
        node->children.push_back(nullptr);
      }
      expr = std::move(node);
    }
    return expr;
  }

  absl::StatusOr<ExprPtr> ParseOr() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseAnd());
    while (IsName("or")) {
      const Token& at = Cur();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseAnd());
      left = MakeBinary(Expr::Kind::kOr, "or", at, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseAnd() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseNot());
    while (IsName("and")) {
      const Token& at = Cur();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseNot());
      left = MakeBinary(Expr::Kind::kAnd, "and", at, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseNot() {
    if (IsName("not")) {
      const Token& at = Cur();
      Advance();
      if (++depth_ > kMaxDepth) return Error(at, "expression nested too deeply");
      ASSIGN_OR_RETURN(ExprPtr operand, ParseNot());
      --depth_;
      ExprPtr node = NewExpr(Expr::Kind::kUnary, at);
      node->name = "not";
      node->children.push_back(std::move(operand));
      return node;
    }
    return ParseCompare();
  }

  absl::StatusOr<ExprPtr> ParseCompare() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath1());
    while (true) {
      const Token& at = Cur();
      std::string op;
      if (Cur().kind == TokenKind::kOp &&
          (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" || Cur().text == "<=" ||
           Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        Advance();
      } else if (IsName("in")) {
        op = "in";
        Advance();
      } else if (IsName("not") && Peek().kind == TokenKind::kName && Peek().text == "in") {
        op = "not in";
        Advance();
        Advance();
      } else {
        return left;
      }
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath1());
      left = MakeBinary(Expr::Kind::kBinary, op, at, std::move(left), std::move(right));
    }
  }

  absl::StatusOr<ExprPtr> ParseMath1() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const Token& at = Cur();
      const std::string op = at.text;
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseConcat());
      left = MakeBinary(Expr::Kind::kBinary, op, at, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseConcat() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseMath2());
    while (IsOp("~")) {
      const Token& at = Cur();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseMath2());
      left = MakeBinary(Expr::Kind::kBinary, "~", at, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseMath2() {
    ASSIGN_OR_RETURN(ExprPtr left, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const Token& at = Cur();
      const std::string op = at.text;
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParsePow());
      left = MakeBinary(Expr::Kind::kBinary, op, at, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParsePow() {
    ASSIGN_OR_RETURN(ExprPtr left, ParseUnary(true));
    while (IsOp("**")) {
      const Token& at = Cur();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr right, ParseUnary(true));
      left = MakeBinary(Expr::Kind::kBinary, "**", at, std::move(left), std::move(right));
    }
    return left;
  }

  absl::StatusOr<ExprPtr> ParseUnary(bool with_filter) {
    if (++depth_ > kMaxDepth) return Error(Cur(), "expression nested too deeply");
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& at = Cur();
      Advance();
      ASSIGN_OR_RETURN(ExprPtr operand, ParseUnary(false));
      node = NewExpr(Expr::Kind::kUnary, at);
      node->name = at.text;
      node->children.push_back(std::move(operand));
    } else {
      ASSIGN_OR_RETURN(node, ParsePrimary());
    }
    ASSIGN_OR_RETURN(node, ParsePostfix(std::move(node)));
    if (with_filter) {
      ASSIGN_OR_RETURN(node, ParseFilters(std::move(node)));
    }
    --depth_;
    return node;
  }

  absl::StatusOr<ExprPtr> ParsePrimary() {
    const Token& t = Cur();
    switch (t.kind) {
      case TokenKind::kName: {
        Advance();
        if (t.text == "true" || t.text == "True") return Literal(t, Value::Bool(true));
        if (t.text == "false" || t.text == "False") return Literal(t, Value::Bool(false));
        if (t.text == "none" || t.text == "None") return Literal(t, Value::MakeNone());
        ExprPtr e = NewExpr(Expr::Kind::kName, t);
        e->name = t.text;
        return e;
      }
      case TokenKind::kString: {
        std::string s = t.text;
        Advance();
        while (Cur().kind == TokenKind::kString) {  // "a" "b" concatenates
          s += Cur().text;
          Advance();
        }
        return Literal(t, Value::String(std::move(s)));
      }
      case TokenKind::kInt:
        Advance();
        return Literal(t, Value::Int(t.int_value));
      case TokenKind::kFloat:
        Advance();
        return Literal(t, Value::Float(t.float_value));
      case TokenKind::kOp:
        if (t.text == "(") {
          Advance();
          if (IsOp(")")) {
            Advance();
            return NewExpr(Expr::Kind::kTuple, t);
          }
          ASSIGN_OR_RETURN(ExprPtr inner, ParseTuple(true));
          RETURN_IF_ERROR(ExpectOp(")"));
          return inner;
        }
        if (t.text == "[") {
          Advance();
          ExprPtr list = NewExpr(Expr::Kind::kList, t);
          while (!IsOp("]")) {
            ASSIGN_OR_RETURN(ExprPtr item, ParseExpression(true));
            list->children.push_back(std::move(item));
            if (!IsOp(",")) break;
            Advance();
          }
          RETURN_IF_ERROR(ExpectOp("]"));
          return list;
        }
        if (t.text == "{") {
          Advance();
          ExprPtr dict = NewExpr(Expr::Kind::kDict, t);
          while (!IsOp("}")) {
            ASSIGN_OR_RETURN(ExprPtr key, ParseExpression(true));
            RETURN_IF_ERROR(ExpectOp(":"));
            ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
            dict->children.push_back(std::move(key));
            dict->children.push_back(std::move(value));
            if (!IsOp(",")) break;
            Advance();
          }
          RETURN_IF_ERROR(ExpectOp("}"));
          return dict;
        }
        break;
      default:
        break;
    }
    return Unexpected("an expression");
  }

  absl::StatusOr<ExprPtr> ParsePostfix(ExprPtr node) {
    while (true) {
      const Token& at = Cur();
      if (IsOp(".")) {
        Advance();
        if (Cur().kind == TokenKind::kInt) {
          ExprPtr item = NewExpr(Expr::Kind::kGetItem, at);
          item->children.push_back(std::move(node));
          item->children.push_back(Literal(Cur(), Value::Int(Cur().int_value)));
          Advance();
          node = std::move(item);
          continue;
        }
        ExprPtr attr = NewExpr(Expr::Kind::kGetAttr, at);
        ASSIGN_OR_RETURN(attr->name, ExpectName());
        attr->children.push_back(std::move(node));
        node = std::move(attr);
      } else if (IsOp("[")) {
        Advance();
        ASSIGN_OR_RETURN(node, ParseSubscript(std::move(node), at));
      } else if (IsOp("(")) {
        ASSIGN_OR_RETURN(node, ParseCall(std::move(node), at, Expr::Kind::kCall));
      } else {
        return node;
      }
    }
  }

  // After '[': an index or a slice.
  absl::StatusOr<ExprPtr> ParseSubscript(ExprPtr object, const Token& at) {
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (IsOp(":")) {
        is_slice = true;
        if (++part > 2) return Unexpected("']'");
        Advance();
        continue;
      }
      if (IsOp("]")) break;
      if (parts[part] != nullptr) return Unexpected("':' or ']'");
      ASSIGN_OR_RETURN(parts[part], ParseExpression(true));
    }
    Advance();  // ]
    if (!is_slice) {
      if (parts[0] == nullptr) return Error(at, "empty subscript");
      ExprPtr item = NewExpr(Expr::Kind::kGetItem, at);
      item->children.push_back(std::move(object));
      item->children.push_back(std::move(parts[0]));
      return item;
    }
    ExprPtr slice = NewExpr(Expr::Kind::kSlice, at);
    slice->children.push_back(std::move(object));
    for (auto& p : parts) slice->children.push_back(std::move(p));
    return slice;
  }

  // At '(': call arguments into `node` (kind kCall or kFilter/kTest whose children[0] is set).
  absl::StatusOr<ExprPtr> ParseCall(ExprPtr callee, const Token& at, Expr::Kind kind) {
    ExprPtr call;
    if (kind == Expr::Kind::kCall) {
      call = NewExpr(Expr::Kind::kCall, at);
      call->children.push_back(std::move(callee));
    } else {
      call = std::move(callee);
    }
    RETURN_IF_ERROR(ExpectOp("("));
    while (!IsOp(")")) {
      if (IsOp("*") || IsOp("**")) return Error(Cur(), "argument unpacking is not supported");
      if (Cur().kind == TokenKind::kName && Peek().kind == TokenKind::kOp && Peek().text == "=") {
        std::string key = Cur().text;
        Advance();
        Advance();
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!call->kwargs.empty())
          return Error(Cur(), "positional argument after keyword argument");
        ASSIGN_OR_RETURN(ExprPtr value, ParseExpression(true));
        call->children.push_back(std::move(value));
      }
      if (!IsOp(",")) break;
      Advance();
    }
    RETURN_IF_ERROR(ExpectOp(")"));
    return call;
  }

  // `| filter(args)` and `is [not] test(args)`, left to right.
  absl::StatusOr<ExprPtr> ParseFilters(ExprPtr node) {
    while (true) {
      const Token& at = Cur();
      if (IsOp("|")) {
        Advance();
        ExprPtr f = NewExpr(Expr::Kind::kFilter, at);
        ASSIGN_OR_RETURN(f->name, ExpectName());
        while (IsOp(".")) {  // dotted filter names
          Advance();
          ASSIGN_OR_RETURN(std::string part, ExpectName());
          f->name += "." + part;
        }
        if (!IsKnownFilter(f->name)) return Error(at, Cat("no filter named '", f->name, "'"));
        f->children.push_back(std::move(node));
        if (IsOp("(")) {
          ASSIGN_OR_RETURN(f, ParseCall(std::move(f), at, Expr::Kind::kFilter));
        }
        node = std::move(f);
      } else if (IsName("is")) {
        Advance();
        ExprPtr t = NewExpr(Expr::Kind::kTest, at);
        if (IsName("not")) {
          t->negated = true;
          Advance();
        }
        if (Cur().kind != TokenKind::kName && !IsOp("==") && !IsOp("!=") && !IsOp("<") &&
            !IsOp(">") && !IsOp("<=") && !IsOp(">=")) {
          return Unexpected("a test name");
        }
        t->name = Cur().text;
        if (!IsKnownTest(t->name)) return Error(Cur(), Cat("no test named '", t->name, "'"));
        Advance();
        t->children.push_back(std::move(node));
        if (IsOp("(")) {
          ASSIGN_OR_RETURN(t, ParseCall(std::move(t), at, Expr::Kind::kTest));
        } else if ((Cur().kind == TokenKind::kName || Cur().kind == TokenKind::kString ||
                    Cur().kind == TokenKind::kInt || Cur().kind == TokenKind::kFloat || IsOp("[") ||
                    IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and") && !IsName("is") &&
                   !IsName("if") && !IsName("in") && !IsName("not")) {
          ASSIGN_OR_RETURN(ExprPtr arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(std::move(arg)));
          t->children.push_back(std::move(arg));
        }
        node = std::move(t);
      } else {
        return node;
      }
    }
  }

  ExprPtr Literal(const Token& at, Value v) {
    ExprPtr e = NewExpr(Expr::Kind::kLiteral, at);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr MakeBinary(Expr::Kind kind, std::string op, const Token& at, ExprPtr l, ExprPtr r) {
    ExprPtr e = NewExpr(kind, at);
    e->name = std::move(op);
    e->children.push_back(std::move(l));
    e->children.push_back(std::move(r));
    return e;
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

absl::StatusOr<StmtList> Parse(const std::vector<Token>& tokens) {
  if (tokens.empty()) return StmtList();
  return Parser(tokens).Run();
}

}  // namespace moe::chat_template::jinja
