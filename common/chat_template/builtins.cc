#include "common/chat_template/builtins.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"

namespace moe::chat_template::jinja {
namespace {

constexpr int64_t kMaxRangeItems = 1'000'000;

// Python's str.isspace() code points.
bool IsPyWhitespace(std::string_view cp) {
  if (cp.size() == 1) {
    const unsigned char c = static_cast<unsigned char>(cp[0]);
    return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  }
  static constexpr std::string_view kWide[] = {"\u0085", "\u00A0", "\u1680", "\u2000", "\u2001",
                                               "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
                                               "\u2007", "\u2008", "\u2009", "\u200A", "\u2028",
                                               "\u2029", "\u202F", "\u205F", "\u3000"};
  for (std::string_view w : kWide) {
    if (cp == w) return true;
  }
  return false;
}

char AsciiUpper(char c) { return (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c; }
char AsciiLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; }
bool IsAsciiAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

std::string Upper(std::string s) {
  for (char& c : s) c = AsciiUpper(c);
  return s;
}
std::string Lower(std::string s) {
  for (char& c : s) c = AsciiLower(c);
  return s;
}
std::string Capitalize(const std::string& s) {
  std::string out = Lower(s);
  if (!out.empty()) out[0] = AsciiUpper(out[0]);
  return out;
}
std::string Title(const std::string& s) {
  std::string out = s;
  bool prev_cased = false;
  for (char& c : out) {
    const bool non_ascii = static_cast<unsigned char>(c) >= 0x80;
    if (IsAsciiAlpha(c)) {
      c = prev_cased ? AsciiLower(c) : AsciiUpper(c);
      prev_cased = true;
    } else {
      prev_cased = non_ascii;  // treat non-ASCII letters as cased so they do not split words
    }
  }
  return out;
}

std::vector<std::string> SplitWhitespace(std::string_view s, int64_t maxsplit) {
  std::vector<std::string> out;
  std::vector<std::string_view> cps = SplitCodePoints(s);
  size_t i = 0;
  while (i < cps.size()) {
    while (i < cps.size() && IsPyWhitespace(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      std::string rest;
      for (size_t k = i; k < cps.size(); ++k) rest.append(cps[k]);
      out.push_back(std::move(rest));
      break;
    }
    std::string word;
    while (i < cps.size() && !IsPyWhitespace(cps[i])) word.append(cps[i++]);
    out.push_back(std::move(word));
  }
  return out;
}

std::vector<std::string> SplitSep(std::string_view s, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t at = s.find(sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(s.substr(start, at - start));
    start = at + sep.size();
  }
  out.emplace_back(s.substr(start));
  return out;
}

std::string Replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  if (count == 0) return std::string(s);
  std::string out;
  if (from.empty()) {
    // Python inserts `to` between every code point (and at both ends).
    int64_t done = 0;
    for (std::string_view cp : SplitCodePoints(s)) {
      if (count < 0 || done < count) {
        out.append(to);
        ++done;
      }
      out.append(cp);
    }
    if (count < 0 || done < count) out.append(to);
    return out;
  }
  size_t start = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t at = s.find(from, start);
    if (at == std::string_view::npos) break;
    out.append(s.substr(start, at - start));
    out.append(to);
    start = at + from.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

Value StringList(const std::vector<std::string>& parts) {
  ValueList items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.push_back(Value::String(p));
  return Value::List(std::move(items));
}

// Argument access: positional index or keyword name, with a default.
class Args {
 public:
  Args(std::string_view fn, ValueList& args, KwArgs& kwargs)
      : fn_(fn), args_(args), kwargs_(kwargs) {}
  Value Get(size_t index, std::string_view name, Value fallback = Value()) const {
    if (index < args_.size()) return args_[index];
    for (const auto& [k, v] : kwargs_) {
      if (k == name) return v;
    }
    return fallback;
  }
  bool Has(size_t index, std::string_view name) const {
    if (index < args_.size()) return true;
    for (const auto& [k, v] : kwargs_) {
      if (k == name) return true;
    }
    return false;
  }
  absl::StatusOr<std::string> String(size_t index, std::string_view name) const {
    Value v = Get(index, name);
    if (!v.is_string()) {
      return Bad(Cat(fn_, "(): argument '", name, "' must be a string, not ", v.TypeName()));
    }
    return v.as_string();
  }
  absl::StatusOr<int64_t> Int(size_t index, std::string_view name, int64_t fallback) const {
    Value v = Get(index, name);
    if (v.is_undefined() || v.is_none()) return fallback;
    if (v.is_int()) return v.as_int();
    if (v.is_bool()) return v.as_bool() ? 1 : 0;
    return Bad(Cat(fn_, "(): argument '", name, "' must be an integer"));
  }
  bool Bool(size_t index, std::string_view name, bool fallback) const {
    Value v = Get(index, name);
    return v.is_undefined() ? fallback : v.Truthy();
  }
  size_t size() const { return args_.size(); }

 private:
  std::string_view fn_;
  ValueList& args_;
  KwArgs& kwargs_;
};

// ---- methods ----

absl::StatusOr<Value> StringMethod(const std::string& self, std::string_view name, ValueList& a,
                                   KwArgs& kw) {
  Args args(name, a, kw);
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    Value chars = args.Get(0, "chars");
    if (!(chars.is_string() || chars.is_none() || chars.is_undefined())) {
      return Bad(Cat(name, " arg must be None or str"));
    }
    const std::string* c = chars.is_string() ? &chars.as_string() : nullptr;
    return Value::String(PyStrip(self, c, name != "rstrip", name != "lstrip"));
  }
  if (name == "upper") return Value::String(Upper(self));
  if (name == "lower") return Value::String(Lower(self));
  if (name == "title") return Value::String(Title(self));
  if (name == "capitalize") return Value::String(Capitalize(self));
  if (name == "split" || name == "rsplit") {
    Value sep = args.Get(0, "sep");
    ASSIGN_OR_RETURN(int64_t maxsplit, args.Int(1, "maxsplit", -1));
    if (sep.is_none() || sep.is_undefined()) {
      if (name == "rsplit" && maxsplit >= 0) return Bad("rsplit() with maxsplit is not supported");
      return StringList(SplitWhitespace(self, maxsplit));
    }
    if (!sep.is_string()) return Bad("split(): sep must be a string or None");
    if (sep.as_string().empty()) return Bad("empty separator");
    if (name == "rsplit" && maxsplit >= 0) {
      std::vector<std::string> all = SplitSep(self, sep.as_string(), -1);
      if (static_cast<int64_t>(all.size()) - 1 <= maxsplit) return StringList(all);
      const size_t head = all.size() - static_cast<size_t>(maxsplit);
      std::string first = all[0];
      for (size_t i = 1; i < head; ++i) first += sep.as_string() + all[i];
      std::vector<std::string> out = {first};
      out.insert(out.end(), all.begin() + head, all.end());
      return StringList(out);
    }
    return StringList(SplitSep(self, sep.as_string(), maxsplit));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines = SplitSep(self, "\n", -1);
    if (!lines.empty() && lines.back().empty()) lines.pop_back();
    for (auto& l : lines) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
    }
    return StringList(lines);
  }
  if (name == "startswith" || name == "endswith") {
    Value p = args.Get(0, "prefix");
    std::vector<std::string> options;
    if (p.is_string()) {
      options.push_back(p.as_string());
    } else if (p.is_list()) {
      for (const Value& v : p.as_list()) {
        if (!v.is_string()) return Bad(Cat(name, "() tuple elements must be strings"));
        options.push_back(v.as_string());
      }
    } else {
      return Bad(Cat(name, "() argument must be str or a tuple of str, not ", p.TypeName()));
    }
    for (const std::string& o : options) {
      const bool hit =
          name == "startswith"
              ? self.compare(0, o.size(), o) == 0 && self.size() >= o.size()
              : self.size() >= o.size() && self.compare(self.size() - o.size(), o.size(), o) == 0;
      if (hit) return Value::Bool(true);
    }
    return Value::Bool(false);
  }
  if (name == "replace") {
    ASSIGN_OR_RETURN(std::string from, args.String(0, "old"));
    ASSIGN_OR_RETURN(std::string to, args.String(1, "new"));
    ASSIGN_OR_RETURN(int64_t count, args.Int(2, "count", -1));
    return Value::String(Replace(self, from, to, count));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    ASSIGN_OR_RETURN(std::string sub, args.String(0, "sub"));
    if (name == "count") {
      if (sub.empty()) return Value::Int(static_cast<int64_t>(CodePointCount(self)) + 1);
      int64_t n = 0;
      for (size_t at = self.find(sub); at != std::string::npos;
           at = self.find(sub, at + sub.size())) {
        ++n;
      }
      return Value::Int(n);
    }
    const size_t at = name == "find" ? self.find(sub) : self.rfind(sub);
    if (at == std::string::npos) return Value::Int(-1);
    return Value::Int(static_cast<int64_t>(CodePointCount(std::string_view(self).substr(0, at))));
  }
  if (name == "join") {
    Value items = args.Get(0, "iterable");
    if (!items.is_list()) return Bad("join() argument must be a list of strings");
    std::string out;
    bool first = true;
    for (const Value& v : items.as_list()) {
      if (!v.is_string()) return Bad("join(): sequence item is not a string");
      if (!first) out += self;
      first = false;
      out += v.as_string();
    }
    return Value::String(std::move(out));
  }
  if (name == "isdigit" || name == "isspace" || name == "isalpha" || name == "isalnum" ||
      name == "islower" || name == "isupper") {
    if (self.empty()) return Value::Bool(false);
    bool all = true, any_cased = false;
    for (std::string_view cp : SplitCodePoints(self)) {
      const char c = cp[0];
      if (name == "isspace") {
        all = all && IsPyWhitespace(cp);
      } else if (name == "isdigit") {
        all = all && cp.size() == 1 && c >= '0' && c <= '9';
      } else if (name == "isalpha") {
        all = all && cp.size() == 1 && IsAsciiAlpha(c);
      } else if (name == "isalnum") {
        all = all && cp.size() == 1 && (IsAsciiAlpha(c) || (c >= '0' && c <= '9'));
      } else if (IsAsciiAlpha(c)) {
        any_cased = true;
        all = all && (name == "islower" ? AsciiLower(c) == c : AsciiUpper(c) == c);
      }
    }
    if (name == "islower" || name == "isupper") return Value::Bool(all && any_cased);
    return Value::Bool(all);
  }
  return Bad(Cat("'str' object has no attribute '", name, "'"));
}

absl::StatusOr<Value> DictMethod(const ValueDict& self, std::string_view name, ValueList& a,
                                 KwArgs& kw) {
  Args args(name, a, kw);
  if (name == "get") {
    Value key = args.Get(0, "key");
    if (key.is_string()) {
      if (const Value* v = self.Find(key.as_string())) return *v;
    }
    Value fallback = args.Get(1, "default");
    return fallback.is_undefined() ? Value::MakeNone() : fallback;
  }
  ValueList out;
  for (const auto& [k, v] : self.items) {
    if (name == "items") {
      out.push_back(Value::List({Value::String(k), v}));
    } else if (name == "keys") {
      out.push_back(Value::String(k));
    } else {
      out.push_back(v);
    }
  }
  return Value::List(std::move(out));
}

class BoundMethod final : public Callable {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<Value> Call(Interpreter&, ValueList args, KwArgs kwargs) const override {
    if (self_.is_string()) return StringMethod(self_.as_string(), name_, args, kwargs);
    return DictMethod(self_.as_dict(), name_, args, kwargs);
  }

 private:
  Value self_;
  std::string name_;
};

// ---- globals ----

class Builtin final : public Callable {
 public:
  using Fn = std::function<absl::StatusOr<Value>(Interpreter&, ValueList&, KwArgs&)>;
  Builtin(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::string_view name() const override { return name_; }
  absl::StatusOr<Value> Call(Interpreter& interp, ValueList args, KwArgs kwargs) const override {
    return fn_(interp, args, kwargs);
  }

 private:
  std::string name_;
  Fn fn_;
};

absl::StatusOr<Value> Range(Interpreter&, ValueList& a, KwArgs& kw) {
  Args args("range", a, kw);
  if (a.empty() || a.size() > 3) return Bad("range() expects 1 to 3 integer arguments");
  int64_t start = 0, stop, step = 1;
  if (a.size() == 1) {
    ASSIGN_OR_RETURN(stop, args.Int(0, "stop", 0));
  } else {
    ASSIGN_OR_RETURN(start, args.Int(0, "start", 0));
    ASSIGN_OR_RETURN(stop, args.Int(1, "stop", 0));
    ASSIGN_OR_RETURN(step, args.Int(2, "step", 1));
  }
  if (step == 0) return Bad("range() arg 3 must not be zero");
  const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                 static_cast<double>(step));
  if (count > kMaxRangeItems) {
    return absl::ResourceExhaustedError("range() too large for a template");
  }
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::Int(i));
  return Value::List(std::move(out));
}

absl::StatusOr<Value> MakeNamespace(Interpreter&, ValueList& a, KwArgs& kw) {
  ValueDict d;
  if (a.size() > 1) return Bad("namespace() takes at most one positional argument");
  if (a.size() == 1) {
    if (!a[0].is_dict()) return Bad("namespace() argument must be a dict");
    d = a[0].as_dict();
  }
  for (auto& [k, v] : kw) d.Set(k, v);
  return Value::Namespace(std::move(d));
}

absl::StatusOr<Value> RaiseException(Interpreter&, ValueList& a, KwArgs&) {
  const std::string msg = a.empty() ? "raise_exception() called" : a[0].Str();
  return absl::InvalidArgumentError(Cat("raise_exception: ", msg));
}

absl::StatusOr<Value> StrftimeNow(Interpreter& interp, ValueList& a, KwArgs&) {
  if (a.size() != 1 || !a[0].is_string()) return Bad("strftime_now() expects one format string");
  return Value::String(absl::FormatTime(a[0].as_string(), interp.Now(), interp.time_zone()));
}

absl::StatusOr<Value> MakeDict(Interpreter&, ValueList& a, KwArgs& kw) {
  ValueDict d;
  if (a.size() == 1 && a[0].is_dict()) d = a[0].as_dict();
  for (auto& [k, v] : kw) d.Set(k, v);
  return Value::Dict(std::move(d));
}

}  // namespace

std::string PyStrip(std::string_view s, const std::string* chars, bool left, bool right) {
  std::vector<std::string_view> cps = SplitCodePoints(s);
  std::vector<std::string_view> strip_set;
  if (chars != nullptr) strip_set = SplitCodePoints(*chars);
  auto strip_it = [&](std::string_view cp) {
    if (chars == nullptr) return IsPyWhitespace(cp);
    return std::find(strip_set.begin(), strip_set.end(), cp) != strip_set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  std::string out;
  for (size_t i = b; i < e; ++i) out.append(cps[i]);
  return out;
}

Value GetMethod(const Value& object, std::string_view name) {
  static constexpr std::string_view kStr[] = {
      "strip",  "lstrip",     "rstrip",     "upper",    "lower",   "title",   "capitalize", "split",
      "rsplit", "splitlines", "startswith", "endswith", "replace", "find",    "rfind",      "count",
      "join",   "isdigit",    "isspace",    "isalpha",  "isalnum", "islower", "isupper"};
  static constexpr std::string_view kDict[] = {"get", "items", "keys", "values"};
  if (object.is_string()) {
    for (std::string_view m : kStr) {
      if (m == name)
        return Value::Function(std::make_shared<BoundMethod>(object, std::string(name)));
    }
  } else if (object.is_dict()) {
    for (std::string_view m : kDict) {
      if (m == name)
        return Value::Function(std::make_shared<BoundMethod>(object, std::string(name)));
    }
  }
  return Value();
}

ValueDict MakeGlobals() {
  ValueDict g;
  auto add = [&](const char* name, Builtin::Fn fn) {
    g.Set(name, Value::Function(std::make_shared<Builtin>(name, std::move(fn))));
  };
  add("range", Range);
  add("namespace", MakeNamespace);
  add("raise_exception", RaiseException);
  add("strftime_now", StrftimeNow);
  add("dict", MakeDict);
  return g;
}

}  // namespace moe::chat_template::jinja
