#include "common/chat_template/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"

namespace moe::chat_template::jinja {

const Value* ValueDict::Find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* ValueDict::Find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::Set(std::string key, Value value) {
  if (Value* existing = Find(key)) {
    *existing = std::move(value);
    return;
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::List(ValueList items) {
  return Value(std::shared_ptr<const ValueList>(std::make_shared<ValueList>(std::move(items))));
}

Value Value::Dict(ValueDict dict) {
  return Value(std::shared_ptr<const ValueDict>(std::make_shared<ValueDict>(std::move(dict))));
}

Value Value::Namespace(ValueDict dict) {
  return Value(std::make_shared<ValueDict>(std::move(dict)));
}

Value Value::Function(std::shared_ptr<const Callable> fn) { return Value(std::move(fn)); }

namespace {

template <typename Json>
Value FromJsonImpl(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return Value::MakeNone();
    case Json::value_t::boolean:
      return Value::Bool(j.template get<bool>());
    case Json::value_t::number_integer:
      return Value::Int(j.template get<int64_t>());
    case Json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::Float(static_cast<double>(u));
      return Value::Int(static_cast<int64_t>(u));
    }
    case Json::value_t::number_float:
      return Value::Float(j.template get<double>());
    case Json::value_t::string:
      return Value::String(j.template get<std::string>());
    case Json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(FromJsonImpl(e));
      return Value::List(std::move(items));
    }
    case Json::value_t::object: {
      ValueDict dict;
      dict.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) dict.Set(it.key(), FromJsonImpl(it.value()));
      return Value::Dict(std::move(dict));
    }
    default:  // binary, discarded
      return Value::MakeNone();
  }
}

}  // namespace

Value Value::FromJson(const nlohmann::json& j) { return FromJsonImpl(j); }
Value Value::FromJson(const nlohmann::ordered_json& j) { return FromJsonImpl(j); }

double Value::as_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_float() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().empty();
    case Kind::kDict:
      return !as_dict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string_view Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then laid out as Python's repr does.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = false;
  if (sci[0] == '-') {
    negative = true;
    sci.erase(0, 1);
  }
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, e_pos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = negative ? "-" : "";
  const int decpt = exp10 + 1;  // position of the decimal point relative to digits
  if (exp10 < -4 || exp10 >= 16) {
    out += digits[0];
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
    out += exp_buf;
  } else if (decpt <= 0) {
    out += "0." + std::string(-decpt, '0') + digits;
  } else if (decpt >= static_cast<int>(digits.size())) {
    out += digits + std::string(decpt - digits.size(), '0') + ".0";
  } else {
    out += digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  return out;
}

namespace {

std::string PyStringRepr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

std::string DictRepr(const ValueDict& d) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : d.items) {
    if (!first) out += ", ";
    first = false;
    out += PyStringRepr(k) + ": " + v.Repr();
  }
  return out + "}";
}

}  // namespace

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return FormatFloat(as_float());
    case Kind::kString:
      return as_string();
    case Kind::kList: {
      std::string out = "[";
      bool first = true;
      for (const Value& v : as_list()) {
        if (!first) out += ", ";
        first = false;
        out += v.Repr();
      }
      return out + "]";
    }
    case Kind::kDict:
      return DictRepr(as_dict());
    case Kind::kNamespace:
      return "<Namespace " + DictRepr(as_namespace()) + ">";
    case Kind::kCallable:
      return Cat("<function ", as_callable().name(), ">");
  }
  return "";
}

std::string Value::Repr() const {
  if (is_string()) return PyStringRepr(as_string());
  if (is_undefined()) return "Undefined";
  return Str();
}

bool ValuesEqual(const Value& a, const Value& b) {
  const bool a_num = a.is_number() || a.is_bool();
  const bool b_num = b.is_number() || b.is_bool();
  if (a_num && b_num) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    const int64_t ai = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t bi = b.is_bool() ? b.as_bool() : b.as_int();
    return ai == bi;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ValueList& x = a.as_list();
      const ValueList& y = b.as_list();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!ValuesEqual(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const ValueDict& x = a.as_dict();
      const ValueDict& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, v] : x.items) {
        const Value* other = y.Find(k);
        if (other == nullptr || !ValuesEqual(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.as_namespace() == &b.as_namespace();
    case Value::Kind::kCallable:
      return &a.as_callable() == &b.as_callable();
    default:
      return false;
  }
}

std::vector<std::string_view> SplitCodePoints(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t len = 1;
    if (c >= 0xF0 && c <= 0xF7) {
      len = 4;
    } else if (c >= 0xE0) {
      len = 3;
    } else if (c >= 0xC0) {
      len = 2;
    }
    if (i + len > s.size()) len = 1;
    for (size_t k = 1; k < len; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) {
        len = 1;
        break;
      }
    }
    out.push_back(s.substr(i, len));
    i += len;
  }
  return out;
}

size_t CodePointCount(std::string_view s) { return SplitCodePoints(s).size(); }

namespace {

// Decodes one code point of a UTF-8 unit produced by SplitCodePoints.
uint32_t DecodeCodePoint(std::string_view cp) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(cp[i]); };
  switch (cp.size()) {
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    case 4:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
    default:
      return b(0);
  }
}

void AppendJsonString(std::string_view s, bool ensure_ascii, std::string* out) {
  out->push_back('"');
  for (std::string_view cp : SplitCodePoints(s)) {
    const unsigned char c = static_cast<unsigned char>(cp[0]);
    if (cp.size() == 1) {
      switch (c) {
        case '"':
          *out += "\\\"";
          continue;
        case '\\':
          *out += "\\\\";
          continue;
        case '\n':
          *out += "\\n";
          continue;
        case '\r':
          *out += "\\r";
          continue;
        case '\t':
          *out += "\\t";
          continue;
        case '\b':
          *out += "\\b";
          continue;
        case '\f':
          *out += "\\f";
          continue;
        default:
          break;
      }
      if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        *out += buf;
      } else {
        out->push_back(static_cast<char>(c));
      }
      continue;
    }
    if (!ensure_ascii) {
      out->append(cp);
      continue;
    }
    uint32_t code = DecodeCodePoint(cp);
    char buf[16];
    if (code >= 0x10000) {
      code -= 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (code >> 10),
                    0xDC00 + (code & 0x3FF));
    } else {
      std::snprintf(buf, sizeof(buf), "\\u%04x", code);
    }
    *out += buf;
  }
  out->push_back('"');
}

absl::Status AppendJson(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 512) return absl::InvalidArgumentError("tojson: value nested too deeply");
  const std::string item_sep = o.has_separators ? o.item_separator : (o.indent >= 0 ? "," : ", ");
  const std::string& key_sep = o.key_separator;
  auto newline = [&](int level) {
    if (o.indent < 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(o.indent) * level, ' ');
  };
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      *out += "null";
      return absl::OkStatus();
    case Value::Kind::kBool:
      *out += v.as_bool() ? "true" : "false";
      return absl::OkStatus();
    case Value::Kind::kInt:
      *out += std::to_string(v.as_int());
      return absl::OkStatus();
    case Value::Kind::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FormatFloat(d);
      }
      return absl::OkStatus();
    }
    case Value::Kind::kString:
      AppendJsonString(v.as_string(), o.ensure_ascii, out);
      return absl::OkStatus();
    case Value::Kind::kList: {
      const ValueList& list = v.as_list();
      if (list.empty()) {
        *out += "[]";
        return absl::OkStatus();
      }
      out->push_back('[');
      for (size_t i = 0; i < list.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        if (absl::Status s = AppendJson(list[i], o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      out->push_back(']');
      return absl::OkStatus();
    }
    case Value::Kind::kDict:
    case Value::Kind::kNamespace: {
      const ValueDict& dict = v.is_dict() ? v.as_dict() : v.as_namespace();
      if (dict.items.empty()) {
        *out += "{}";
        return absl::OkStatus();
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : dict.items) entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out->push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) *out += item_sep;
        newline(depth + 1);
        AppendJsonString(entries[i]->first, o.ensure_ascii, out);
        *out += key_sep;
        if (absl::Status s = AppendJson(entries[i]->second, o, depth + 1, out); !s.ok()) return s;
      }
      newline(depth);
      out->push_back('}');
      return absl::OkStatus();
    }
    case Value::Kind::kCallable:
      return absl::InvalidArgumentError("tojson: Object of type function is not JSON serializable");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ToJson(const Value& v, const JsonOptions& options) {
  std::string out;
  if (absl::Status s = AppendJson(v, options, 0, &out); !s.ok()) return s;
  return out;
}

}  // namespace moe::chat_template::jinja
