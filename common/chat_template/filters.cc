// Filters and tests of the chat-template interpreter (declared in builtins.h).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "common/base/status_macros.h"
#include "common/chat_template/builtins.h"

namespace moe::chat_template::jinja {
namespace {

Value Arg(const ValueList& args, const KwArgs& kwargs, size_t index, std::string_view name,
          Value fallback = Value()) {
  if (index < args.size()) return args[index];
  for (const auto& [k, v] : kwargs) {
    if (k == name) return v;
  }
  return fallback;
}

// Calls a str method through the same code path as `s.method(...)`.
absl::StatusOr<Value> StrMethod(Interpreter& interp, const Value& s, std::string_view method,
                                ValueList args = {}) {
  Value fn = GetMethod(s, method);
  return fn.as_callable().Call(interp, std::move(args), {});
}

// Items a filter iterates: list items, dict keys, string code points; undefined is empty.
absl::StatusOr<ValueList> Iterate(const Value& v, std::string_view filter) {
  if (v.is_list()) return v.as_list();
  ValueList out;
  if (v.is_dict()) {
    for (const auto& [k, unused] : v.as_dict().items) out.push_back(Value::String(k));
  } else if (v.is_string()) {
    for (std::string_view cp : SplitCodePoints(v.as_string())) {
      out.push_back(Value::String(std::string(cp)));
    }
  } else if (!v.is_undefined()) {
    return Bad(Cat(filter, ": '", v.TypeName(), "' object is not iterable"));
  }
  return out;
}

// Jinja attribute path ("a.b", "0") for map/selectattr/sort/sum.
Value GetAttrPath(const Value& item, const std::string& path) {
  Value cur = item;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    if (dot == std::string::npos) dot = path.size();
    const std::string part = path.substr(start, dot - start);
    if (cur.is_dict() || cur.is_namespace()) {
      const ValueDict& d = cur.is_dict() ? cur.as_dict() : cur.as_namespace();
      const Value* v = d.Find(part);
      cur = v ? *v : Value();
    } else if (cur.is_list()) {
      int64_t i;
      if (!absl::SimpleAtoi(part, &i) || i < 0 || i >= static_cast<int64_t>(cur.as_list().size())) {
        return Value();
      }
      cur = cur.as_list()[i];
    } else {
      return Value();
    }
    start = dot + 1;
  }
  return cur;
}

// Ordering for sort/min/max: numbers, strings (optionally case-folded), lists.
absl::StatusOr<int> Order(const Value& a, const Value& b, bool case_sensitive) {
  const bool an = a.is_number() || a.is_bool(), bn = b.is_number() || b.is_bool();
  if (an && bn) return a.as_double() < b.as_double() ? -1 : (a.as_double() > b.as_double());
  if (a.is_string() && b.is_string()) {
    std::string x = a.as_string(), y = b.as_string();
    if (!case_sensitive) {
      for (char& c : x) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
      for (char& c : y) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    }
    const int c = x.compare(y);
    return c < 0 ? -1 : (c > 0);
  }
  return Bad(
      Cat("'<' not supported between instances of '", a.TypeName(), "' and '", b.TypeName(), "'"));
}

absl::StatusOr<ValueList> Sorted(ValueList items, bool reverse, bool case_sensitive,
                                 const Value& attribute) {
  absl::Status error;
  auto key = [&](const Value& v) {
    return attribute.is_string() ? GetAttrPath(v, attribute.as_string())
           : attribute.is_int()  ? GetAttrPath(v, std::to_string(attribute.as_int()))
                                 : v;
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    if (!error.ok()) return false;
    absl::StatusOr<int> c = Order(key(x), key(y), case_sensitive);
    if (!c.ok()) {
      error = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  if (!error.ok()) return error;
  return items;
}

// select/reject/selectattr/rejectattr.
absl::StatusOr<Value> SelectFilter(Interpreter& interp, std::string_view name, const Value& operand,
                                   ValueList args) {
  const bool by_attr = name == "selectattr" || name == "rejectattr";
  const bool keep_match = name == "select" || name == "selectattr";
  ASSIGN_OR_RETURN(ValueList items, Iterate(operand, name));
  std::string attr;
  size_t next = 0;
  if (by_attr) {
    if (args.empty() || !args[0].is_string()) return Bad(Cat(name, ": missing attribute"));
    attr = args[0].as_string();
    next = 1;
  }
  std::string test;
  if (next < args.size()) {
    if (!args[next].is_string()) return Bad(Cat(name, ": test name must be a string"));
    test = args[next].as_string();
    ++next;
  }
  ValueList test_args(args.begin() + std::min(next, args.size()), args.end());
  ValueList out;
  for (const Value& item : items) {
    RETURN_IF_ERROR(interp.CountStep());
    const Value subject = by_attr ? GetAttrPath(item, attr) : item;
    bool match;
    if (test.empty()) {
      match = subject.Truthy();
    } else {
      ASSIGN_OR_RETURN(match, ApplyTest(interp, test, subject, test_args));
    }
    if (match == keep_match) out.push_back(item);
  }
  return Value::List(std::move(out));
}

std::string HtmlEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

absl::StatusOr<Value> ToJsonFilter(const Value& operand, const ValueList& args,
                                   const KwArgs& kwargs) {
  // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
  JsonOptions o;
  o.ensure_ascii = Arg(args, kwargs, 0, "ensure_ascii").Truthy();
  Value indent = Arg(args, kwargs, 1, "indent");
  if (indent.is_int()) {
    o.indent = static_cast<int>(std::clamp<int64_t>(indent.as_int(), 0, 64));
  } else if (indent.is_string()) {
    return Bad("tojson: string indent is not supported");
  } else if (!indent.is_none() && !indent.is_undefined()) {
    return Bad("tojson: indent must be an integer");
  }
  Value seps = Arg(args, kwargs, 2, "separators");
  if (seps.is_list()) {
    if (seps.as_list().size() != 2 || !seps.as_list()[0].is_string() ||
        !seps.as_list()[1].is_string()) {
      return Bad("tojson: separators must be a pair of strings");
    }
    o.has_separators = true;
    o.item_separator = seps.as_list()[0].as_string();
    o.key_separator = seps.as_list()[1].as_string();
  }
  o.sort_keys = Arg(args, kwargs, 3, "sort_keys").Truthy();
  ASSIGN_OR_RETURN(std::string s, ToJson(operand, o));
  return Value::String(std::move(s));
}

absl::StatusOr<Value> Length(const Value& v) {
  if (v.is_string()) return Value::Int(static_cast<int64_t>(CodePointCount(v.as_string())));
  if (v.is_list()) return Value::Int(static_cast<int64_t>(v.as_list().size()));
  if (v.is_dict()) return Value::Int(static_cast<int64_t>(v.as_dict().items.size()));
  if (v.is_undefined()) return Value::Int(0);
  return Bad(Cat("object of type '", v.TypeName(), "' has no len()"));
}

absl::StatusOr<Value> ToNumber(const Value& v, bool to_int, const Value& fallback) {
  if (v.is_int()) return to_int ? v : Value::Float(static_cast<double>(v.as_int()));
  if (v.is_bool()) return to_int ? Value::Int(v.as_bool()) : Value::Float(v.as_bool());
  if (v.is_float()) {
    if (!to_int) return v;
    if (!std::isfinite(v.as_float())) return fallback;
    return Value::Int(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    std::string s = PyStrip(v.as_string(), nullptr, true, true);
    int64_t i;
    double d;
    if (to_int && absl::SimpleAtoi(s, &i)) return Value::Int(i);
    if (absl::SimpleAtod(s, &d)) {
      return to_int ? (std::isfinite(d) ? Value::Int(static_cast<int64_t>(d)) : fallback)
                    : Value::Float(d);
    }
  }
  return fallback;
}

constexpr std::string_view kFilters[] = {
    "abs",    "attr",   "capitalize", "count",      "d",           "default", "dictsort",
    "e",      "escape", "first",      "float",      "forceescape", "indent",  "int",
    "items",  "join",   "last",       "length",     "list",        "lower",   "map",
    "max",    "min",    "reject",     "rejectattr", "replace",     "reverse", "round",
    "safe",   "select", "selectattr", "sort",       "string",      "sum",     "title",
    "tojson", "trim",   "unique",     "upper",      "wordcount"};
constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",      "equalto",   "escaped", "even",
    "false",   "float",    "ge",       "greaterthan", "gt",      "in",        "integer", "iterable",
    "le",      "lessthan", "lower",    "lt",          "mapping", "ne",        "none",    "number",
    "odd",     "sameas",   "sequence", "string",      "true",    "undefined", "upper",   "==",
    "!=",      "<",        "<=",       ">",           ">="};

}  // namespace

bool IsKnownFilter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool IsKnownTest(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

absl::StatusOr<Value> ApplyFilter(Interpreter& interp, std::string_view name, Value operand,
                                  ValueList args, KwArgs kwargs) {
  if (name == "default" || name == "d") {
    const bool boolean = Arg(args, kwargs, 1, "boolean").Truthy();
    if (operand.is_undefined() || (boolean && !operand.Truthy())) {
      Value fallback = Arg(args, kwargs, 0, "default_value");
      return fallback.is_undefined() ? Value::String("") : fallback;
    }
    return operand;
  }
  if (name == "tojson") return ToJsonFilter(operand, args, kwargs);
  if (name == "safe") return operand;
  if (name == "string") return Value::String(operand.Str());
  if (name == "length" || name == "count") return Length(operand);
  if (name == "escape" || name == "e" || name == "forceescape") {
    return Value::String(HtmlEscape(operand.Str()));
  }
  if (name == "trim" || name == "upper" || name == "lower" || name == "title" ||
      name == "capitalize" || name == "replace") {
    Value s = operand.is_string() ? operand : Value::String(operand.Str());
    if (name == "trim") return StrMethod(interp, s, "strip", {Arg(args, kwargs, 0, "chars")});
    if (name == "replace") {
      ValueList a = {Arg(args, kwargs, 0, "old"), Arg(args, kwargs, 1, "new")};
      Value count = Arg(args, kwargs, 2, "count");
      if (!count.is_undefined()) a.push_back(count);
      return StrMethod(interp, s, "replace", std::move(a));
    }
    return StrMethod(interp, s, name);
  }
  if (name == "wordcount") {
    ASSIGN_OR_RETURN(Value words, StrMethod(interp, Value::String(operand.Str()), "split"));
    return Value::Int(static_cast<int64_t>(words.as_list().size()));
  }
  if (name == "indent") {
    Value width_v = Arg(args, kwargs, 0, "width", Value::Int(4));
    const std::string pad = width_v.is_string() ? width_v.as_string()
                            : width_v.is_int()
                                ? std::string(std::clamp<int64_t>(width_v.as_int(), 0, 256), ' ')
                                : std::string(4, ' ');
    const bool first = Arg(args, kwargs, 1, "first").Truthy();
    const bool blank = Arg(args, kwargs, 2, "blank").Truthy();
    const std::string s = operand.Str();
    std::string out;
    size_t start = 0;
    for (int line = 0;; ++line) {
      size_t nl = s.find('\n', start);
      std::string_view l(s.data() + start, (nl == std::string::npos ? s.size() : nl) - start);
      if ((line > 0 || first) && (blank || !l.empty())) out += pad;
      out.append(l);
      if (nl == std::string::npos) break;
      out.push_back('\n');
      start = nl + 1;
    }
    return Value::String(std::move(out));
  }
  if (name == "int" || name == "float") {
    Value fallback =
        Arg(args, kwargs, 0, "default", name == "int" ? Value::Int(0) : Value::Float(0.0));
    return ToNumber(operand, name == "int", fallback);
  }
  if (name == "abs") {
    if (operand.is_int()) {
      if (operand.as_int() == INT64_MIN) return Bad("integer overflow");
      return Value::Int(std::abs(operand.as_int()));
    }
    if (operand.is_float()) return Value::Float(std::fabs(operand.as_float()));
    return Bad(Cat("bad operand type for abs(): '", operand.TypeName(), "'"));
  }
  if (name == "round") {
    if (!operand.is_number()) return Bad("round: value must be a number");
    const Value precision_v = Arg(args, kwargs, 0, "precision", Value::Int(0));
    const int64_t precision =
        precision_v.is_int() ? std::clamp<int64_t>(precision_v.as_int(), 0, 15) : 0;
    const Value method_v = Arg(args, kwargs, 1, "method", Value::String("common"));
    const std::string method = method_v.is_string() ? method_v.as_string() : "common";
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = operand.as_double() * scale;
    double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return Value::Float(r / scale);
  }
  if (name == "items") {
    if (operand.is_undefined()) return Value::List({});
    if (!operand.is_dict()) return Bad(Cat("items: expected a dict, got ", operand.TypeName()));
    ValueList out;
    for (const auto& [k, v] : operand.as_dict().items) {
      out.push_back(Value::List({Value::String(k), v}));
    }
    return Value::List(std::move(out));
  }
  if (name == "dictsort") {
    if (!operand.is_dict()) return Bad("dictsort: expected a dict");
    const bool case_sensitive = Arg(args, kwargs, 0, "case_sensitive").Truthy();
    const Value by = Arg(args, kwargs, 1, "by", Value::String("key"));
    const bool reverse = Arg(args, kwargs, 2, "reverse").Truthy();
    ValueList pairs;
    for (const auto& [k, v] : operand.as_dict().items) {
      pairs.push_back(Value::List({Value::String(k), v}));
    }
    const bool by_value = by.is_string() && by.as_string() == "value";
    ASSIGN_OR_RETURN(ValueList sorted, Sorted(std::move(pairs), reverse, case_sensitive,
                                              Value::Int(by_value ? 1 : 0)));
    return Value::List(std::move(sorted));
  }
  if (name == "attr") {
    Value attr = Arg(args, kwargs, 0, "name");
    if (!attr.is_string()) return Bad("attr: name must be a string");
    if (operand.is_dict() || operand.is_namespace()) {
      const ValueDict& d = operand.is_dict() ? operand.as_dict() : operand.as_namespace();
      const Value* v = d.Find(attr.as_string());
      if (v != nullptr) return *v;
    }
    return GetMethod(operand, attr.as_string());
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr") {
    return SelectFilter(interp, name, operand, std::move(args));
  }
  // The remaining filters work on sequences.
  ASSIGN_OR_RETURN(ValueList items, Iterate(operand, name));
  if (name == "first") return items.empty() ? Value() : items.front();
  if (name == "last") return items.empty() ? Value() : items.back();
  if (name == "list") return Value::List(std::move(items));
  if (name == "reverse") {
    std::reverse(items.begin(), items.end());
    if (operand.is_string()) {
      std::string out;
      for (const Value& v : items) out += v.as_string();
      return Value::String(std::move(out));
    }
    return Value::List(std::move(items));
  }
  if (name == "join") {
    const Value sep = Arg(args, kwargs, 0, "d", Value::String(""));
    const Value attribute = Arg(args, kwargs, 1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += sep.Str();
      out +=
          (attribute.is_string() ? GetAttrPath(items[i], attribute.as_string()) : items[i]).Str();
    }
    return Value::String(std::move(out));
  }
  if (name == "sort") {
    ASSIGN_OR_RETURN(
        ValueList sorted,
        Sorted(std::move(items), Arg(args, kwargs, 0, "reverse").Truthy(),
               Arg(args, kwargs, 1, "case_sensitive").Truthy(), Arg(args, kwargs, 2, "attribute")));
    return Value::List(std::move(sorted));
  }
  if (name == "unique") {
    ValueList out;
    for (const Value& v : items) {
      bool seen = false;
      for (const Value& u : out) seen = seen || ValuesEqual(u, v);
      if (!seen) out.push_back(v);
    }
    return Value::List(std::move(out));
  }
  if (name == "min" || name == "max") {
    if (items.empty()) return Value();
    ASSIGN_OR_RETURN(ValueList sorted, Sorted(std::move(items), name == "max",
                                              Arg(args, kwargs, 0, "case_sensitive").Truthy(),
                                              Arg(args, kwargs, 1, "attribute")));
    return sorted.front();
  }
  if (name == "sum") {
    const Value attribute = Arg(args, kwargs, 0, "attribute");
    bool is_float = false;
    double fsum = 0;
    int64_t isum = 0;
    Value start = Arg(args, kwargs, 1, "start", Value::Int(0));
    items.insert(items.begin(), start);
    for (size_t i = 0; i < items.size(); ++i) {
      const Value v = (i > 0 && attribute.is_string())
                          ? GetAttrPath(items[i], attribute.as_string())
                          : items[i];
      if (!(v.is_number() || v.is_bool())) return Bad("sum: items must be numbers");
      if (v.is_float()) is_float = true;
      fsum += v.as_double();
      if (!v.is_float() &&
          __builtin_add_overflow(isum, v.is_bool() ? v.as_bool() : v.as_int(), &isum)) {
        return Bad("integer overflow");
      }
    }
    return is_float ? Value::Float(fsum) : Value::Int(isum);
  }
  if (name == "map") {
    ValueList out;
    const Value attribute = Arg({}, kwargs, 0, "attribute");
    if (attribute.is_string()) {
      const Value fallback = Arg({}, kwargs, 0, "default");
      for (const Value& v : items) {
        Value got = GetAttrPath(v, attribute.as_string());
        out.push_back(got.is_undefined() ? fallback : got);
      }
      return Value::List(std::move(out));
    }
    if (args.empty() || !args[0].is_string())
      return Bad("map: expected a filter name or attribute=");
    const std::string filter = args[0].as_string();
    ValueList rest(args.begin() + 1, args.end());
    for (const Value& v : items) {
      RETURN_IF_ERROR(interp.CountStep());
      ASSIGN_OR_RETURN(Value mapped, ApplyFilter(interp, filter, v, rest, kwargs));
      out.push_back(std::move(mapped));
    }
    return Value::List(std::move(out));
  }
  return Bad(Cat("unknown filter '", name, "'"));
}

absl::StatusOr<bool> ApplyTest(Interpreter& interp, std::string_view name, const Value& v,
                               const ValueList& args) {
  const Value arg = args.empty() ? Value() : args[0];
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "sequence") return v.is_list() || v.is_dict() || v.is_string();
  if (name == "callable") return v.is_callable();
  if (name == "escaped") return false;
  if (name == "sameas") {
    if (v.kind() != arg.kind()) return false;
    if (v.is_none() || v.is_undefined()) return true;
    if (v.is_bool()) return v.as_bool() == arg.as_bool();
    return ValuesEqual(v, arg) && (v.is_list() ? &v.as_list() == &arg.as_list() : true);
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    ASSIGN_OR_RETURN(Value r, StrMethod(interp, v, name == "lower" ? "islower" : "isupper"));
    return r.as_bool();
  }
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (!(v.is_int() || v.is_bool())) return Bad(Cat("test '", name, "' needs an integer"));
    const int64_t i = v.is_bool() ? v.as_bool() : v.as_int();
    if (name == "odd") return i % 2 != 0;
    if (name == "even") return i % 2 == 0;
    if (!arg.is_int() || arg.as_int() == 0) return Bad("divisibleby: needs a non-zero integer");
    return i % arg.as_int() == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return ValuesEqual(v, arg);
  if (name == "ne" || name == "!=") return !ValuesEqual(v, arg);
  if (name == "in") {
    if (arg.is_string())
      return v.is_string() && arg.as_string().find(v.as_string()) != std::string::npos;
    if (arg.is_list()) {
      for (const Value& item : arg.as_list()) {
        if (ValuesEqual(item, v)) return true;
      }
      return false;
    }
    if (arg.is_dict()) return v.is_string() && arg.as_dict().Find(v.as_string()) != nullptr;
    return Bad("test 'in' needs a container");
  }
  if (name == "lt" || name == "lessthan" || name == "<" || name == "le" || name == "<=" ||
      name == "gt" || name == "greaterthan" || name == ">" || name == "ge" || name == ">=") {
    ASSIGN_OR_RETURN(int c, Order(v, arg, /*case_sensitive=*/true));
    if (name == "lt" || name == "lessthan" || name == "<") return c < 0;
    if (name == "le" || name == "<=") return c <= 0;
    if (name == "gt" || name == "greaterthan" || name == ">") return c > 0;
    return c >= 0;
  }
  return Bad(Cat("unknown test '", name, "'"));
}

}  // namespace moe::chat_template::jinja
