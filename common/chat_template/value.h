// Runtime values of the chat-template interpreter (a Jinja subset, see chat_template.h).
//
// A Value is one of: undefined, none, bool, int (int64), float (double), string (UTF-8),
// list, dict (insertion-ordered, string keys), namespace (the only mutable container, as in
// Jinja's `namespace()`), or callable (built-in function, bound method, macro).
// Lists and dicts are immutable once built and shared by reference, so copying a Value is cheap.
// Formatting follows Python: `str()` for output (`None`, `True`, `1.0`, `['a', 1]`) and
// `json.dumps` for `tojson`.
//
// Thread-safety: a Value may be read from several threads; namespaces are mutated only by the
// single render that created them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::chat_template::jinja {

class Value;
class Interpreter;

using ValueList = std::vector<Value>;
using KwArgs = std::vector<std::pair<std::string, Value>>;

// Insertion-ordered string-keyed map (Python dict / JSON object order).
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* Find(std::string_view key) const;
  Value* Find(std::string_view key);
  // Inserts or replaces, keeping the first insertion position.
  void Set(std::string key, Value value);
};

// Anything that can be called from a template: globals, bound methods, macros.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual std::string_view name() const = 0;
  // Returns kInvalidArgument for bad arguments, kAborted for raise_exception().
  virtual absl::StatusOr<Value> Call(Interpreter& interp, ValueList args, KwArgs kwargs) const = 0;
};

struct Undefined {};
struct None {};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() : v_(Undefined{}) {}
  static Value MakeNone() { return Value(None{}); }
  static Value Bool(bool b) { return Value(b); }
  static Value Int(int64_t i) { return Value(i); }
  static Value Float(double d) { return Value(d); }
  static Value String(std::string s) { return Value(std::move(s)); }
  static Value List(ValueList items);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict dict);
  static Value Function(std::shared_ptr<const Callable> fn);
  // Converts JSON (null -> none, numbers keep int vs float, objects keep key order).
  static Value FromJson(const nlohmann::json& j);
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  // REQUIRES: the matching is_*() is true.
  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numeric value of an int, float or bool.
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const ValueList& as_list() const { return *std::get<std::shared_ptr<const ValueList>>(v_); }
  const ValueDict& as_dict() const { return *std::get<std::shared_ptr<const ValueDict>>(v_); }
  // Namespaces are shared and mutable (`{% set ns.x = 1 %}`).
  ValueDict& as_namespace() const { return *std::get<std::shared_ptr<ValueDict>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v_); }

  // Python truthiness (undefined, none, false, 0, 0.0, "", [], {} are false).
  bool Truthy() const;
  // Python str(): what `{{ value }}` prints (undefined prints nothing).
  std::string Str() const;
  // Python repr() (strings quoted), used inside containers.
  std::string Repr() const;
  // Jinja type name for error messages ("str", "int", "list", "dict", "NoneType", ...).
  std::string_view TypeName() const;

 private:
  using Variant = std::variant<Undefined, None, bool, int64_t, double, std::string,
                               std::shared_ptr<const ValueList>, std::shared_ptr<const ValueDict>,
                               std::shared_ptr<ValueDict>, std::shared_ptr<const Callable>>;
  template <typename T>
  explicit Value(T v) : v_(std::move(v)) {}

  Variant v_;
};

// Python `==` (1 == 1.0, True == 1; lists and dicts compare deeply; undefined == undefined).
bool ValuesEqual(const Value& a, const Value& b);

// Python float repr: shortest round-trip digits, exponent form below 1e-4 or from 1e16.
std::string FormatFloat(double d);

// Python json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...) as the
// `tojson` filter of transformers does it. indent < 0 means none. Fails on callables.
struct JsonOptions {
  int indent = -1;
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator;  // empty: ", " without indent, "," with indent
  std::string key_separator = ": ";
  bool has_separators = false;
};
absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options);

// Concatenates strings and integers (Debian's abseil StrCat takes no std::string_view).
inline void AppendPiece(std::string* out, std::string_view s) { out->append(s); }
inline void AppendPiece(std::string* out, char c) { out->push_back(c); }
template <typename T, typename = std::enable_if_t<std::is_integral_v<T>>>
void AppendPiece(std::string* out, T v) {
  out->append(std::to_string(v));
}
template <typename... Args>
std::string Cat(const Args&... args) {
  std::string out;
  (AppendPiece(&out, args), ...);
  return out;
}

// UTF-8 helpers: code points of a string (invalid bytes pass through as single units).
std::vector<std::string_view> SplitCodePoints(std::string_view s);
size_t CodePointCount(std::string_view s);

}  // namespace moe::chat_template::jinja
