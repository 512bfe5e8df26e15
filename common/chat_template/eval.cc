#include "common/chat_template/eval.h"

#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "common/base/status_macros.h"
#include "common/chat_template/builtins.h"

namespace moe::chat_template::jinja {
namespace {

class MacroCallable final : public Callable {
 public:
  MacroCallable(const Stmt* stmt, std::shared_ptr<Frame> closure, Value caller = Value())
      : stmt_(stmt), closure_(std::move(closure)), caller_(std::move(caller)) {}
  std::string_view name() const override { return stmt_->text; }
  absl::StatusOr<Value> Call(Interpreter& interp, ValueList args, KwArgs kwargs) const override {
    return interp.RunMacro(*stmt_, closure_, std::move(args), std::move(kwargs), caller_);
  }

 private:
  const Stmt* stmt_;
  std::shared_ptr<Frame> closure_;
  Value caller_;
};

bool IsNumeric(const Value& v) { return v.is_int() || v.is_float() || v.is_bool(); }
int64_t AsInt(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

// Python slice of n elements -> selected indices.
std::vector<int64_t> SliceIndices(int64_t n, const Value& start_v, const Value& stop_v,
                                  int64_t step) {
  std::vector<int64_t> idx;
  int64_t start, stop;
  if (step > 0) {
    start = start_v.is_none() || start_v.is_undefined() ? 0 : AsInt(start_v);
    stop = stop_v.is_none() || stop_v.is_undefined() ? n : AsInt(stop_v);
    if (start < 0) start = std::max<int64_t>(start + n, 0);
    if (stop < 0) stop = std::max<int64_t>(stop + n, 0);
    start = std::min(start, n);
    stop = std::min(stop, n);
    for (int64_t i = start; i < stop; i += step) idx.push_back(i);
  } else {
    start = start_v.is_none() || start_v.is_undefined() ? n - 1 : AsInt(start_v);
    stop = stop_v.is_none() || stop_v.is_undefined() ? -1 : AsInt(stop_v);
    if (start < 0) start = std::max<int64_t>(start + n, -1);
    if (start >= n) start = n - 1;
    if (!(stop_v.is_none() || stop_v.is_undefined())) {
      if (stop < 0) stop = std::max<int64_t>(stop + n, -1);
      if (stop >= n) stop = n - 1;
    }
    for (int64_t i = start; i > stop; i += step) idx.push_back(i);
  }
  return idx;
}

int Compare3(double a, double b) { return a < b ? -1 : (a > b ? 1 : 0); }

}  // namespace

Interpreter::Interpreter(const EvalLimits& limits, common::Clock& clock, absl::TimeZone time_zone)
    : limits_(limits), clock_(clock), time_zone_(time_zone) {}

absl::StatusOr<std::string> Interpreter::Render(const StmtList& program, const ValueDict& context) {
  auto globals = std::make_shared<Frame>();
  globals->vars = MakeGlobals();
  auto ctx = std::make_shared<Frame>();
  ctx->vars = context;
  ctx->parent = globals;
  frame_ = std::make_shared<Frame>();
  frame_->parent = ctx;
  std::string out;
  absl::StatusOr<Flow> flow = ExecList(program, &out);
  for (const auto& f : captured_frames_) f->vars.items.clear();
  captured_frames_.clear();
  frame_.reset();
  if (!flow.ok()) return flow.status();
  return out;
}

absl::Status Interpreter::CountStep() {
  if (++steps_ > limits_.max_steps) {
    return absl::ResourceExhaustedError(
        Cat("template render exceeded ", limits_.max_steps, " steps"));
  }
  return absl::OkStatus();
}

absl::Status Interpreter::Append(std::string* out, std::string_view text) {
  output_bytes_ += text.size();
  if (output_bytes_ > limits_.max_output_bytes) {
    return absl::ResourceExhaustedError(
        Cat("template output exceeded ", limits_.max_output_bytes, " bytes"));
  }
  out->append(text);
  return absl::OkStatus();
}

absl::Status Interpreter::ErrorAt(const Expr& e, std::string_view msg) const {
  return absl::InvalidArgumentError(
      Cat("template error at line ", e.line, ", column ", e.col, ": ", msg));
}

absl::Status Interpreter::At(const Expr& e, absl::Status s) const {
  if (s.ok() || s.code() != absl::StatusCode::kInvalidArgument ||
      absl::StartsWith(s.message(), "template error at line")) {
    return s;
  }
  return ErrorAt(e, std::string(s.message()));
}

Value Interpreter::Lookup(std::string_view name) const {
  for (const Frame* f = frame_.get(); f != nullptr; f = f->parent.get()) {
    if (const Value* v = f->vars.Find(name)) return *v;
  }
  return Value();
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecList(const StmtList& list, std::string* out) {
  for (const auto& s : list) {
    ASSIGN_OR_RETURN(Flow flow, Exec(*s, out));
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::Exec(const Stmt& s, std::string* out) {
  RETURN_IF_ERROR(CountStep());
  switch (s.kind) {
    case Stmt::Kind::kText:
      RETURN_IF_ERROR(Append(out, s.text));
      return Flow::kNormal;
    case Stmt::Kind::kOutput: {
      ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
      RETURN_IF_ERROR(Append(out, v.Str()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kIf:
      for (const auto& [cond, body] : s.branches) {
        ASSIGN_OR_RETURN(Value c, Eval(*cond));
        if (c.Truthy()) return ExecList(body, out);
      }
      return ExecList(s.else_body, out);
    case Stmt::Kind::kFor:
      return ExecFor(s, out);
    case Stmt::Kind::kSet:
      RETURN_IF_ERROR(ExecSet(s));
      return Flow::kNormal;
    case Stmt::Kind::kSetBlock: {
      std::string body;
      ASSIGN_OR_RETURN(Flow flow, ExecList(s.body, &body));
      (void)flow;
      Value v = Value::String(std::move(body));
      if (s.expr != nullptr) {
        ASSIGN_OR_RETURN(v, EvalFilter(*s.expr, &v));
      }
      frame_->vars.Set(s.text, std::move(v));
      return Flow::kNormal;
    }
    case Stmt::Kind::kMacro:
      captured_frames_.push_back(frame_);
      frame_->vars.Set(s.text, Value::Function(std::make_shared<MacroCallable>(&s, frame_)));
      return Flow::kNormal;
    case Stmt::Kind::kCallBlock: {
      // `caller()` renders the block body; the callee sees it as its `caller` variable.
      captured_frames_.push_back(frame_);
      Value caller = Value::Function(std::make_shared<MacroCallable>(&s, frame_));
      const Expr& call = *s.expr;
      ASSIGN_OR_RETURN(Value fn, Eval(*call.children[0]));
      ValueList args;
      KwArgs kwargs;
      RETURN_IF_ERROR(EvalArgs(call, 1, &args, &kwargs));
      kwargs.emplace_back("caller", std::move(caller));
      ASSIGN_OR_RETURN(Value result, CallValue(fn, std::move(args), std::move(kwargs)));
      RETURN_IF_ERROR(Append(out, result.Str()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kFilterBlock: {
      std::string body;
      ASSIGN_OR_RETURN(Flow flow, ExecList(s.body, &body));
      (void)flow;
      Value v = Value::String(std::move(body));
      ASSIGN_OR_RETURN(Value result, EvalFilter(*s.expr, &v));
      RETURN_IF_ERROR(Append(out, result.Str()));
      return Flow::kNormal;
    }
    case Stmt::Kind::kBreak:
      return Flow::kBreak;
    case Stmt::Kind::kContinue:
      return Flow::kContinue;
  }
  return Flow::kNormal;
}

absl::StatusOr<Interpreter::Flow> Interpreter::ExecFor(const Stmt& s, std::string* out) {
  ASSIGN_OR_RETURN(Value iterable, Eval(*s.expr));
  ValueList items;
  if (iterable.is_list()) {
    items = iterable.as_list();
  } else if (iterable.is_dict()) {
    for (const auto& [k, v] : iterable.as_dict().items) items.push_back(Value::String(k));
  } else if (iterable.is_string()) {
    for (std::string_view cp : SplitCodePoints(iterable.as_string())) {
      items.push_back(Value::String(std::string(cp)));
    }
  } else if (iterable.is_undefined()) {
    // Jinja iterates an undefined value as empty.
  } else {
    return ErrorAt(*s.expr, Cat("'", iterable.TypeName(), "' object is not iterable"));
  }
  const std::shared_ptr<Frame> outer = frame_;
  auto bind = [&](const std::shared_ptr<Frame>& f, const Value& item) -> absl::Status {
    frame_ = f;
    absl::Status st = Assign(*s.target, item);
    frame_ = outer;
    return st;
  };
  // The `if` filter of a loop is applied before loop.* counts are known.
  if (s.cond != nullptr) {
    ValueList kept;
    for (const Value& item : items) {
      RETURN_IF_ERROR(CountStep());
      auto f = std::make_shared<Frame>();
      f->parent = outer;
      RETURN_IF_ERROR(bind(f, item));
      frame_ = f;
      absl::StatusOr<Value> c = Eval(*s.cond);
      frame_ = outer;
      if (!c.ok()) return c.status();
      if (c->Truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    RETURN_IF_ERROR(CountStep());
    auto f = std::make_shared<Frame>();
    f->parent = outer;
    ValueDict loop;
    loop.items.reserve(10);
    loop.Set("index", Value::Int(i + 1));
    loop.Set("index0", Value::Int(i));
    loop.Set("revindex", Value::Int(n - i));
    loop.Set("revindex0", Value::Int(n - i - 1));
    loop.Set("first", Value::Bool(i == 0));
    loop.Set("last", Value::Bool(i == n - 1));
    loop.Set("length", Value::Int(n));
    loop.Set("depth", Value::Int(1));
    loop.Set("depth0", Value::Int(0));
    loop.Set("previtem", i > 0 ? items[i - 1] : Value());
    loop.Set("nextitem", i + 1 < n ? items[i + 1] : Value());
    f->vars.Set("loop", Value::Dict(std::move(loop)));
    RETURN_IF_ERROR(bind(f, items[i]));
    frame_ = f;
    absl::StatusOr<Flow> flow = ExecList(s.body, out);
    frame_ = outer;
    if (!flow.ok()) return flow.status();
    if (*flow == Flow::kBreak) break;
  }
  if (n == 0) return ExecList(s.else_body, out);
  return Flow::kNormal;
}

absl::Status Interpreter::Assign(const Expr& target, Value value) {
  if (target.kind == Expr::Kind::kName) {
    frame_->vars.Set(target.name, std::move(value));
    return absl::OkStatus();
  }
  if (target.kind == Expr::Kind::kTuple) {
    ValueList parts;
    if (value.is_list()) {
      parts = value.as_list();
    } else if (value.is_string()) {
      for (std::string_view cp : SplitCodePoints(value.as_string())) {
        parts.push_back(Value::String(std::string(cp)));
      }
    } else {
      return ErrorAt(target, Cat("cannot unpack non-iterable ", value.TypeName()));
    }
    if (parts.size() != target.children.size()) {
      return ErrorAt(target, Cat("expected ", target.children.size(), " values to unpack, got ",
                                 parts.size()));
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      RETURN_IF_ERROR(Assign(*target.children[i], std::move(parts[i])));
    }
    return absl::OkStatus();
  }
  if (target.kind == Expr::Kind::kGetAttr) {
    ASSIGN_OR_RETURN(Value object, Eval(*target.children[0]));
    if (!object.is_namespace()) {
      return ErrorAt(target, "cannot assign attribute on non-namespace object");
    }
    object.as_namespace().Set(target.name, std::move(value));
    return absl::OkStatus();
  }
  return ErrorAt(target, "invalid assignment target");
}

absl::Status Interpreter::ExecSet(const Stmt& s) {
  ASSIGN_OR_RETURN(Value v, Eval(*s.expr));
  return Assign(*s.target, std::move(v));
}

absl::StatusOr<Value> Interpreter::RunMacro(const Stmt& macro,
                                            const std::shared_ptr<Frame>& closure, ValueList args,
                                            KwArgs kwargs, const Value& caller) {
  if (call_depth_ >= limits_.max_call_depth) {
    return absl::ResourceExhaustedError(
        Cat("template macro calls nested deeper than ", limits_.max_call_depth));
  }
  auto f = std::make_shared<Frame>();
  f->parent = closure;
  const std::shared_ptr<Frame> saved = frame_;
  frame_ = f;
  ++call_depth_;
  absl::Status status;
  ValueList varargs;
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < macro.params.size()) {
      f->vars.Set(macro.params[i].name, std::move(args[i]));
    } else {
      varargs.push_back(std::move(args[i]));
    }
  }
  ValueDict extra_kwargs;
  for (auto& [k, v] : kwargs) {
    bool is_param = false;
    for (const MacroParam& p : macro.params) is_param = is_param || p.name == k;
    if (is_param) {
      f->vars.Set(k, std::move(v));
    } else if (k == "caller") {
      f->vars.Set("caller", std::move(v));
    } else {
      extra_kwargs.Set(k, std::move(v));
    }
  }
  for (const MacroParam& p : macro.params) {
    if (f->vars.Find(p.name) != nullptr) continue;
    if (p.default_value == nullptr) {
      f->vars.Set(p.name, Value());
      continue;
    }
    absl::StatusOr<Value> d = Eval(*p.default_value);
    if (!d.ok()) {
      status = d.status();
      break;
    }
    f->vars.Set(p.name, *std::move(d));
  }
  f->vars.Set("varargs", Value::List(std::move(varargs)));
  f->vars.Set("kwargs", Value::Dict(std::move(extra_kwargs)));
  if (!caller.is_undefined() && f->vars.Find("caller") == nullptr) f->vars.Set("caller", caller);
  std::string out;
  if (status.ok()) {
    absl::StatusOr<Flow> flow = ExecList(macro.body, &out);
    if (!flow.ok()) status = flow.status();
  }
  --call_depth_;
  frame_ = saved;
  if (!status.ok()) return status;
  return Value::String(std::move(out));
}

absl::StatusOr<Value> Interpreter::CallValue(const Value& fn, ValueList args, KwArgs kwargs) {
  RETURN_IF_ERROR(CountStep());
  if (!fn.is_callable()) {
    return absl::InvalidArgumentError(fn.is_undefined()
                                          ? "call of an undefined value"
                                          : Cat("'", fn.TypeName(), "' object is not callable"));
  }
  return fn.as_callable().Call(*this, std::move(args), std::move(kwargs));
}

absl::Status Interpreter::EvalArgs(const Expr& e, size_t first, ValueList* args, KwArgs* kwargs) {
  for (size_t i = first; i < e.children.size(); ++i) {
    ASSIGN_OR_RETURN(Value v, Eval(*e.children[i]));
    args->push_back(std::move(v));
  }
  for (const auto& [k, expr] : e.kwargs) {
    ASSIGN_OR_RETURN(Value v, Eval(*expr));
    kwargs->emplace_back(k, std::move(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<Value> Interpreter::EvalCall(const Expr& e) {
  const Expr& callee = *e.children[0];
  ASSIGN_OR_RETURN(Value fn, Eval(callee));
  ValueList args;
  KwArgs kwargs;
  RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
  if (!fn.is_callable()) {
    std::string what = callee.kind == Expr::Kind::kName || callee.kind == Expr::Kind::kGetAttr
                           ? "'" + callee.name + "'"
                           : "value";
    return ErrorAt(e, fn.is_undefined() ? Cat(what, " is undefined and cannot be called")
                                        : Cat(what, " is not callable"));
  }
  absl::StatusOr<Value> r = CallValue(fn, std::move(args), std::move(kwargs));
  if (!r.ok()) return At(e, r.status());
  return r;
}

absl::StatusOr<Value> Interpreter::EvalFilter(const Expr& e, const Value* placeholder_value) {
  const Value* saved = placeholder_;
  if (placeholder_value != nullptr) placeholder_ = placeholder_value;
  absl::StatusOr<Value> operand = Eval(*e.children[0]);
  ValueList args;
  KwArgs kwargs;
  absl::Status s = operand.ok() ? EvalArgs(e, 1, &args, &kwargs) : operand.status();
  placeholder_ = saved;
  if (!s.ok()) return s;
  RETURN_IF_ERROR(CountStep());
  absl::StatusOr<Value> r =
      ApplyFilter(*this, e.name, *std::move(operand), std::move(args), std::move(kwargs));
  if (!r.ok()) return At(e, r.status());
  return r;
}

absl::StatusOr<Value> Interpreter::EvalTest(const Expr& e) {
  ASSIGN_OR_RETURN(Value operand, Eval(*e.children[0]));
  ValueList args;
  KwArgs kwargs;
  RETURN_IF_ERROR(EvalArgs(e, 1, &args, &kwargs));
  absl::StatusOr<bool> r = ApplyTest(*this, e.name, operand, args);
  if (!r.ok()) return At(e, r.status());
  return Value::Bool(*r != e.negated);
}

absl::StatusOr<Value> Interpreter::Eval(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      if (!e.name.empty() && placeholder_ != nullptr) return *placeholder_;
      return e.literal;
    case Expr::Kind::kName:
      return Lookup(e.name);
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      ValueList items;
      items.reserve(e.children.size());
      for (const auto& c : e.children) {
        ASSIGN_OR_RETURN(Value v, Eval(*c));
        items.push_back(std::move(v));
      }
      return Value::List(std::move(items));
    }
    case Expr::Kind::kDict: {
      ValueDict dict;
      for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
        ASSIGN_OR_RETURN(Value k, Eval(*e.children[i]));
        if (!k.is_string()) return ErrorAt(*e.children[i], "dict keys must be strings");
        ASSIGN_OR_RETURN(Value v, Eval(*e.children[i + 1]));
        dict.Set(k.as_string(), std::move(v));
      }
      return Value::Dict(std::move(dict));
    }
    case Expr::Kind::kGetAttr: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
      if (obj.is_namespace()) {
        const Value* v = obj.as_namespace().Find(e.name);
        return v ? *v : Value();
      }
      Value method = GetMethod(obj, e.name);
      if (!method.is_undefined()) return method;
      if (obj.is_dict()) {
        const Value* v = obj.as_dict().Find(e.name);
        return v ? *v : Value();
      }
      return Value();
    }
    case Expr::Kind::kGetItem: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
      ASSIGN_OR_RETURN(Value key, Eval(*e.children[1]));
      if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
        const ValueDict& d = obj.is_dict() ? obj.as_dict() : obj.as_namespace();
        if (const Value* v = d.Find(key.as_string())) return *v;
        return GetMethod(obj, key.as_string());
      }
      if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
        int64_t i = AsInt(key);
        if (obj.is_list()) {
          const ValueList& l = obj.as_list();
          const int64_t n = static_cast<int64_t>(l.size());
          if (i < 0) i += n;
          return i >= 0 && i < n ? l[i] : Value();
        }
        std::vector<std::string_view> cps = SplitCodePoints(obj.as_string());
        const int64_t n = static_cast<int64_t>(cps.size());
        if (i < 0) i += n;
        return i >= 0 && i < n ? Value::String(std::string(cps[i])) : Value();
      }
      if (key.is_string()) return GetMethod(obj, key.as_string());
      return Value();
    }
    case Expr::Kind::kSlice: {
      ASSIGN_OR_RETURN(Value obj, Eval(*e.children[0]));
      Value parts[3];
      for (int k = 0; k < 3; ++k) {
        if (e.children[k + 1] == nullptr) continue;
        ASSIGN_OR_RETURN(parts[k], Eval(*e.children[k + 1]));
        if (!(parts[k].is_int() || parts[k].is_bool() || parts[k].is_none())) {
          return ErrorAt(e, "slice indices must be integers or None");
        }
      }
      const int64_t step = parts[2].is_int() || parts[2].is_bool() ? AsInt(parts[2]) : 1;
      if (step == 0) return ErrorAt(e, "slice step cannot be zero");
      if (obj.is_list()) {
        const ValueList& l = obj.as_list();
        ValueList out;
        for (int64_t i : SliceIndices(static_cast<int64_t>(l.size()), parts[0], parts[1], step)) {
          out.push_back(l[i]);
        }
        return Value::List(std::move(out));
      }
      if (obj.is_string()) {
        std::vector<std::string_view> cps = SplitCodePoints(obj.as_string());
        std::string out;
        for (int64_t i : SliceIndices(static_cast<int64_t>(cps.size()), parts[0], parts[1], step)) {
          out.append(cps[i]);
        }
        return Value::String(std::move(out));
      }
      if (obj.is_undefined()) return Value();
      return ErrorAt(e, Cat("'", obj.TypeName(), "' object is not subscriptable"));
    }
    case Expr::Kind::kCall:
      return EvalCall(e);
    case Expr::Kind::kFilter:
      return EvalFilter(e, nullptr);
    case Expr::Kind::kTest:
      return EvalTest(e);
    case Expr::Kind::kUnary: {
      ASSIGN_OR_RETURN(Value v, Eval(*e.children[0]));
      if (e.name == "not") return Value::Bool(!v.Truthy());
      if (v.is_float()) return Value::Float(e.name == "-" ? -v.as_float() : v.as_float());
      if (v.is_int() || v.is_bool()) {
        const int64_t i = AsInt(v);
        if (e.name == "-" && i == INT64_MIN) return ErrorAt(e, "integer overflow");
        return Value::Int(e.name == "-" ? -i : i);
      }
      return ErrorAt(e, Cat("bad operand type for unary ", e.name, ": '", v.TypeName(), "'"));
    }
    case Expr::Kind::kAnd: {
      ASSIGN_OR_RETURN(Value l, Eval(*e.children[0]));
      if (!l.Truthy()) return l;
      return Eval(*e.children[1]);
    }
    case Expr::Kind::kOr: {
      ASSIGN_OR_RETURN(Value l, Eval(*e.children[0]));
      if (l.Truthy()) return l;
      return Eval(*e.children[1]);
    }
    case Expr::Kind::kCond: {
      ASSIGN_OR_RETURN(Value c, Eval(*e.children[1]));
      if (c.Truthy()) return Eval(*e.children[0]);
      if (e.children[2] == nullptr) return Value();
      return Eval(*e.children[2]);
    }
    case Expr::Kind::kBinary:
      return EvalBinary(e);
  }
  return ErrorAt(e, "unknown expression");
}

absl::StatusOr<Value> Interpreter::EvalBinary(const Expr& e) {
  ASSIGN_OR_RETURN(Value l, Eval(*e.children[0]));
  ASSIGN_OR_RETURN(Value r, Eval(*e.children[1]));
  const std::string& op = e.name;
  auto type_error = [&]() {
    return ErrorAt(e, Cat("unsupported operand types for ", op, ": '", l.TypeName(), "' and '",
                          r.TypeName(), "'"));
  };
  if (op == "==") return Value::Bool(ValuesEqual(l, r));
  if (op == "!=") return Value::Bool(!ValuesEqual(l, r));
  if (op == "~") return Value::String(l.Str() + r.Str());
  if (op == "in" || op == "not in") {
    bool found = false;
    if (r.is_string()) {
      if (!l.is_string()) {
        return ErrorAt(e, Cat("'in <string>' requires string as left operand, not ", l.TypeName()));
      }
      found = r.as_string().find(l.as_string()) != std::string::npos;
    } else if (r.is_list()) {
      for (const Value& item : r.as_list()) found = found || ValuesEqual(item, l);
    } else if (r.is_dict() || r.is_namespace()) {
      const ValueDict& d = r.is_dict() ? r.as_dict() : r.as_namespace();
      found = l.is_string() && d.Find(l.as_string()) != nullptr;
    } else if (!r.is_undefined()) {
      return ErrorAt(e, Cat("argument of type '", r.TypeName(), "' is not iterable"));
    }
    return Value::Bool(op == "in" ? found : !found);
  }
  if (op == "<" || op == "<=" || op == ">" || op == ">=") {
    int c;
    if (IsNumeric(l) && IsNumeric(r)) {
      c = Compare3(l.as_double(), r.as_double());
      if (!l.is_float() && !r.is_float()) c = AsInt(l) < AsInt(r) ? -1 : (AsInt(l) > AsInt(r));
    } else if (l.is_string() && r.is_string()) {
      c = l.as_string().compare(r.as_string());
      c = c < 0 ? -1 : (c > 0 ? 1 : 0);
    } else {
      return ErrorAt(e, Cat("'", op, "' not supported between instances of '", l.TypeName(),
                            "' and '", r.TypeName(), "'"));
    }
    if (op == "<") return Value::Bool(c < 0);
    if (op == "<=") return Value::Bool(c <= 0);
    if (op == ">") return Value::Bool(c > 0);
    return Value::Bool(c >= 0);
  }
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value::String(l.as_string() + r.as_string());
    if (l.is_list() && r.is_list()) {
      ValueList out = l.as_list();
      out.insert(out.end(), r.as_list().begin(), r.as_list().end());
      return Value::List(std::move(out));
    }
  }
  if (op == "*" && ((l.is_string() || l.is_list()) && (r.is_int() || r.is_bool()))) {
    const int64_t times = std::max<int64_t>(AsInt(r), 0);
    const size_t unit = l.is_string() ? l.as_string().size() : l.as_list().size();
    if (unit > 0 && static_cast<uint64_t>(times) > limits_.max_output_bytes / unit) {
      return absl::ResourceExhaustedError("template repetition too large");
    }
    if (l.is_string()) {
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += l.as_string();
      return Value::String(std::move(out));
    }
    ValueList out;
    for (int64_t i = 0; i < times; ++i)
      out.insert(out.end(), l.as_list().begin(), l.as_list().end());
    return Value::List(std::move(out));
  }
  if (!IsNumeric(l) || !IsNumeric(r)) return type_error();
  const bool as_float = l.is_float() || r.is_float() || op == "/";
  if (as_float) {
    const double a = l.as_double(), b = r.as_double();
    if (op == "+") return Value::Float(a + b);
    if (op == "-") return Value::Float(a - b);
    if (op == "*") return Value::Float(a * b);
    if (op == "**") return Value::Float(std::pow(a, b));
    if (b == 0) return ErrorAt(e, "division by zero");
    if (op == "/") return Value::Float(a / b);
    if (op == "//") return Value::Float(std::floor(a / b));
    if (op == "%") {
      double m = std::fmod(a, b);
      if (m != 0 && ((m < 0) != (b < 0))) m += b;
      return Value::Float(m);
    }
    return type_error();
  }
  const int64_t a = AsInt(l), b = AsInt(r);
  int64_t res = 0;
  if (op == "+") {
    if (__builtin_add_overflow(a, b, &res)) return ErrorAt(e, "integer overflow");
    return Value::Int(res);
  }
  if (op == "-") {
    if (__builtin_sub_overflow(a, b, &res)) return ErrorAt(e, "integer overflow");
    return Value::Int(res);
  }
  if (op == "*") {
    if (__builtin_mul_overflow(a, b, &res)) return ErrorAt(e, "integer overflow");
    return Value::Int(res);
  }
  if (op == "**") {
    if (b < 0) return Value::Float(std::pow(static_cast<double>(a), static_cast<double>(b)));
    res = 1;
    int64_t base = a;
    for (int64_t k = b; k > 0;) {
      if ((k & 1) && __builtin_mul_overflow(res, base, &res)) {
        return ErrorAt(e, "integer overflow");
      }
      k >>= 1;
      if (k > 0 && __builtin_mul_overflow(base, base, &base)) {
        return ErrorAt(e, "integer overflow");
      }
    }
    return Value::Int(res);
  }
  if (b == 0) return ErrorAt(e, "integer division or modulo by zero");
  if (a == INT64_MIN && b == -1) return ErrorAt(e, "integer overflow");
  int64_t q = a / b, m = a % b;
  if (m != 0 && ((m < 0) != (b < 0))) {
    --q;
    m += b;
  }
  if (op == "//") return Value::Int(q);
  if (op == "%") return Value::Int(m);
  return type_error();
}

}  // namespace moe::chat_template::jinja
