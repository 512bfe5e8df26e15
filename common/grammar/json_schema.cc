#include "common/grammar/json_schema.h"

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/grammar/regex.h"
#include "nlohmann/json.hpp"

namespace moe::grammar {
namespace {

using Json = nlohmann::ordered_json;

// Keywords that constrain values in ways this grammar cannot express: refused, never ignored.
const absl::flat_hash_set<std::string>& UnsupportedKeywords() {
  static const auto* k = new absl::flat_hash_set<std::string>{"not",
                                                              "if",
                                                              "then",
                                                              "else",
                                                              "patternProperties",
                                                              "propertyNames",
                                                              "dependentRequired",
                                                              "dependentSchemas",
                                                              "dependencies",
                                                              "unevaluatedProperties",
                                                              "unevaluatedItems",
                                                              "minProperties",
                                                              "maxProperties",
                                                              "contains",
                                                              "minContains",
                                                              "maxContains",
                                                              "multipleOf",
                                                              "$dynamicRef",
                                                              "$recursiveRef"};
  return *k;
}

constexpr const char* kFormats[][2] = {
    {"date", "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"},
    {"time",
     "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]"
     ")"},
    {"date-time",
     "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
     "(\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"},
    {"uuid", "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"},
    {"ipv4",
     "((25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\\.){3}(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]"
     ")"},
    {"email",
     "[a-zA-Z0-9._%+-]{1,64}@[a-zA-Z0-9-]{1,63}(\\.[a-zA-Z0-9-]{1,63}){0,4}\\.[a-zA-Z]{2,24}"},
};

std::string PointerEscape(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

std::string Where(const std::string& path) { return path.empty() ? "/" : path; }

class SchemaConverter {
 public:
  SchemaConverter(const JsonGrammarOptions& options, Grammar* g) : o_(options), g_(*g) {}

  absl::StatusOr<ExprId> Convert(const Json& root, const Json& s, const std::string& path) {
    root_ = &root;
    return ConvertSchema(s, path);
  }

  // Whitespace between tokens.
  ExprId Ws() {
    if (o_.max_whitespace <= 0) return g_.Empty();
    ByteSet ws;
    for (char c : {' ', '\t', '\n', '\r'}) ws.set(static_cast<uint8_t>(c));
    return g_.Repeat(g_.Bytes(ws), 0, o_.max_whitespace);
  }
  ExprId Sep(char c) { return g_.Seq({Ws(), g_.Byte(static_cast<uint8_t>(c)), Ws()}); }

  ExprId StringChar() {
    CodepointRanges all{{0, 0x10FFFF}};
    std::vector<ExprId> options{JsonStringCharacters(all, &g_)};
    // Other escapes a JSON text may hold: \/ and \uXXXX outside the surrogates.
    options.push_back(g_.Literal("\\/"));
    ExprId hex = g_.Codepoints({{'0', '9'}, {'A', 'F'}, {'a', 'f'}});
    ExprId not_d = g_.Codepoints({{'0', '9'}, {'A', 'C'}, {'E', 'F'}, {'a', 'c'}, {'e', 'f'}});
    ExprId d = g_.Codepoints({{'D', 'D'}, {'d', 'd'}});
    ExprId low = g_.ByteRange('0', '7');
    options.push_back(g_.Seq(
        {g_.Literal("\\u"),
         g_.Alt({g_.Seq({not_d, g_.Repeat(hex, 3, 3)}), g_.Seq({d, low, g_.Repeat(hex, 2, 2)})})}));
    return g_.Alt(std::move(options));
  }

  ExprId StringExpr(int32_t min, int32_t max) {
    return g_.Seq({g_.Byte('"'), g_.Repeat(StringChar(), min, max), g_.Byte('"')});
  }

  ExprId Digits(int32_t min, int32_t max) { return g_.Repeat(g_.ByteRange('0', '9'), min, max); }

  ExprId UnboundedInteger() {
    return g_.Seq({g_.Optional(g_.Byte('-')),
                   g_.Alt({g_.Byte('0'), g_.Seq({g_.ByteRange('1', '9'),
                                                 Digits(0, o_.max_integer_digits - 1)})})});
  }

  ExprId Fraction() { return g_.Seq({g_.Byte('.'), Digits(1, o_.max_fraction_digits)}); }

  ExprId UnboundedNumber() {
    ByteSet e, sign;
    e.set('e');
    e.set('E');
    sign.set('+');
    sign.set('-');
    return g_.Seq({UnboundedInteger(), g_.Optional(Fraction()),
                   g_.Optional(g_.Seq({g_.Bytes(e), g_.Optional(g_.Bytes(sign)),
                                       Digits(1, o_.max_exponent_digits)}))});
  }

  // Equal-length decimal strings lo <= hi.
  ExprId DigitRange(const std::string& lo, const std::string& hi) {
    const size_t n = lo.size();
    if (n == 1) return g_.ByteRange(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0]));
    const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
    if (lo[0] == hi[0])
      return g_.Seq({g_.Byte(static_cast<uint8_t>(lo[0])), DigitRange(lo_rest, hi_rest)});
    const std::string zeros(n - 1, '0'), nines(n - 1, '9');
    if (lo_rest == zeros && hi_rest == nines) {
      return g_.Seq({g_.ByteRange(static_cast<uint8_t>(lo[0]), static_cast<uint8_t>(hi[0])),
                     Digits(static_cast<int32_t>(n - 1), static_cast<int32_t>(n - 1))});
    }
    std::vector<ExprId> options;
    options.push_back(g_.Seq({g_.Byte(static_cast<uint8_t>(lo[0])), DigitRange(lo_rest, nines)}));
    if (lo[0] + 1 <= hi[0] - 1) {
      options.push_back(
          g_.Seq({g_.ByteRange(static_cast<uint8_t>(lo[0] + 1), static_cast<uint8_t>(hi[0] - 1)),
                  Digits(static_cast<int32_t>(n - 1), static_cast<int32_t>(n - 1))}));
    }
    options.push_back(g_.Seq({g_.Byte(static_cast<uint8_t>(hi[0])), DigitRange(zeros, hi_rest)}));
    return g_.Alt(std::move(options));
  }

  // Decimal integers in [a, b], 0 <= a <= b, without leading zeros.
  ExprId NonNegativeRange(int64_t a, int64_t b) {
    const std::string sa = std::to_string(a), sb = std::to_string(b);
    std::vector<ExprId> options;
    int64_t pow = 1;  // 10^(len - 1)
    for (size_t len = 1; len <= sb.size(); ++len) {
      if (len >= sa.size()) {
        const int64_t lo = len == sa.size() ? a : pow;
        const int64_t hi = len == sb.size() ? b : pow * 10 - 1;
        if (lo <= hi) options.push_back(DigitRange(std::to_string(lo), std::to_string(hi)));
      }
      if (len < sb.size()) pow *= 10;
    }
    return g_.Alt(std::move(options));
  }

  int64_t MaxMagnitude() const {
    int64_t m = 1;
    for (int32_t i = 0; i < std::min(o_.max_integer_digits, 18); ++i) m *= 10;
    return m - 1;
  }

  // Integers in [lo, hi].
  ExprId IntRange(int64_t lo, int64_t hi) {
    std::vector<ExprId> options;
    if (hi >= 0) options.push_back(NonNegativeRange(std::max<int64_t>(lo, 0), hi));
    if (lo < 0) {
      const int64_t neg_hi = std::min<int64_t>(hi, -1);
      options.push_back(g_.Seq({g_.Byte('-'), NonNegativeRange(-neg_hi, -lo)}));
    }
    return g_.Alt(std::move(options));
  }

  struct Bounds {
    bool has_lo = false, has_hi = false;
    double lo = 0, hi = 0;
    bool lo_exclusive = false, hi_exclusive = false;
  };

  absl::Status ReadBounds(const Json& s, const std::string& path, Bounds* b) {
    auto number = [&](const char* key, double* out) -> absl::StatusOr<bool> {
      auto it = s.find(key);
      if (it == s.end()) return false;
      if (it->is_boolean()) return false;  // draft-04 exclusive flags, read below
      if (!it->is_number() || !std::isfinite(it->get<double>())) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": '", key, "' must be a number"));
      }
      *out = it->get<double>();
      return true;
    };
    double v;
    absl::StatusOr<bool> got = number("minimum", &v);
    if (!got.ok()) return got.status();
    if (*got) {
      b->has_lo = true;
      b->lo = v;
    }
    got = number("maximum", &v);
    if (!got.ok()) return got.status();
    if (*got) {
      b->has_hi = true;
      b->hi = v;
    }
    got = number("exclusiveMinimum", &v);
    if (!got.ok()) return got.status();
    if (*got && (!b->has_lo || v >= b->lo)) {
      b->has_lo = true;
      b->lo = v;
      b->lo_exclusive = true;
    }
    got = number("exclusiveMaximum", &v);
    if (!got.ok()) return got.status();
    if (*got && (!b->has_hi || v <= b->hi)) {
      b->has_hi = true;
      b->hi = v;
      b->hi_exclusive = true;
    }
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_boolean()) {
      b->lo_exclusive = s["exclusiveMinimum"].get<bool>() && b->has_lo;
    }
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_boolean()) {
      b->hi_exclusive = s["exclusiveMaximum"].get<bool>() && b->has_hi;
    }
    return absl::OkStatus();
  }

  // The integer bounds [A, B] inside the bounds, clamped to the digit limit.
  void IntegerBounds(const Bounds& b, int64_t* lo, int64_t* hi) const {
    const double max = static_cast<double>(MaxMagnitude());
    double a = -max, z = max;
    if (b.has_lo) a = b.lo_exclusive ? std::floor(b.lo) + 1 : std::ceil(b.lo);
    if (b.has_hi) z = b.hi_exclusive ? std::ceil(b.hi) - 1 : std::floor(b.hi);
    *lo = static_cast<int64_t>(std::max(a, -max));
    *hi = static_cast<int64_t>(std::min(z, max));
  }

  absl::StatusOr<ExprId> IntegerSchema(const Json& s, const std::string& path) {
    Bounds b;
    if (absl::Status st = ReadBounds(s, path, &b); !st.ok()) return st;
    if (!b.has_lo && !b.has_hi) return UnboundedInteger();
    int64_t lo, hi;
    IntegerBounds(b, &lo, &hi);
    if (lo > hi) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": no integer satisfies the bounds"));
    }
    return IntRange(lo, hi);
  }

  absl::StatusOr<ExprId> NumberSchema(const Json& s, const std::string& path) {
    Bounds b;
    if (absl::Status st = ReadBounds(s, path, &b); !st.ok()) return st;
    if (!b.has_lo && !b.has_hi) return UnboundedNumber();
    // Integers in [A, B], and decimals M.F whose open interval (M, M+1) (or (-(M+1), -M)) lies in
    // [A, B]: a subset of the allowed numbers that is exact to write without arithmetic.
    int64_t lo, hi;
    IntegerBounds(b, &lo, &hi);
    std::vector<ExprId> options;
    if (lo <= hi) options.push_back(IntRange(lo, hi));
    const int64_t pos_lo = std::max<int64_t>(lo, 0), pos_hi = hi - 1;
    if (pos_lo <= pos_hi) options.push_back(g_.Seq({NonNegativeRange(pos_lo, pos_hi), Fraction()}));
    const int64_t neg_lo = std::max<int64_t>(0, -hi), neg_hi = -lo - 1;
    if (neg_lo <= neg_hi) {
      options.push_back(g_.Seq({g_.Byte('-'), NonNegativeRange(neg_lo, neg_hi), Fraction()}));
    }
    if (options.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schema ", Where(path),
          ": the number bounds are narrower than one unit around no integer; not supported"));
    }
    return g_.Alt(std::move(options));
  }

  absl::StatusOr<int32_t> Count(const Json& s, const char* key, int32_t def,
                                const std::string& path) {
    auto it = s.find(key);
    if (it == s.end()) return def;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": '", key, "' must be a non-negative integer"));
    }
    if (it->get<int64_t>() > o_.max_count) {
      return absl::InvalidArgumentError(absl::StrCat("schema ", Where(path), ": '", key, "' of ",
                                                     it->get<int64_t>(), " is above the supported ",
                                                     o_.max_count));
    }
    return static_cast<int32_t>(it->get<int64_t>());
  }

  absl::StatusOr<ExprId> StringSchema(const Json& s, const std::string& path) {
    auto pattern = s.find("pattern");
    if (pattern != s.end()) {
      if (!pattern->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": 'pattern' must be a string"));
      }
      if (s.contains("minLength") || s.contains("maxLength")) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path),
                         ": 'pattern' together with minLength/maxLength is not "
                         "supported; put the length into the pattern"));
      }
      absl::StatusOr<ExprId> body =
          RegexToExpr(pattern->get<std::string>(), RegexContext::kJsonString, &g_);
      if (!body.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path + "/pattern"), ": ", body.status().message()));
      }
      return g_.Seq({g_.Byte('"'), *body, g_.Byte('"')});
    }
    if (auto format = s.find("format"); format != s.end() && format->is_string()) {
      for (const auto& [name, regex] : kFormats) {
        if (*format != name) continue;
        absl::StatusOr<ExprId> body = RegexToExpr(regex, RegexContext::kJsonString, &g_);
        if (!body.ok()) return body.status();
        return g_.Seq({g_.Byte('"'), *body, g_.Byte('"')});
      }
    }
    absl::StatusOr<int32_t> min = Count(s, "minLength", 0, path);
    if (!min.ok()) return min.status();
    absl::StatusOr<int32_t> max = Count(s, "maxLength", -1, path);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *max < *min) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": maxLength is below minLength"));
    }
    return StringExpr(*min, *max);
  }

  absl::StatusOr<ExprId> ArraySchema(const Json& s, const std::string& path) {
    absl::StatusOr<int32_t> min = Count(s, "minItems", 0, path);
    if (!min.ok()) return min.status();
    absl::StatusOr<int32_t> max = Count(s, "maxItems", -1, path);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *max < *min) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": maxItems is below minItems"));
    }
    if (auto u = s.find("uniqueItems"); u != s.end() && u->is_boolean() && u->get<bool>()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": 'uniqueItems' is not supported"));
    }
    std::vector<ExprId> prefix;
    if (auto p = s.find("prefixItems"); p != s.end()) {
      if (!p->is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": 'prefixItems' must be an array"));
      }
      for (size_t i = 0; i < p->size(); ++i) {
        absl::StatusOr<ExprId> e = ConvertSchema((*p)[i], absl::StrCat(path, "/prefixItems/", i));
        if (!e.ok()) return e.status();
        prefix.push_back(*e);
      }
    }
    std::optional<ExprId> item;
    if (auto it = s.find("items"); it != s.end()) {
      if (!(it->is_boolean() && !it->get<bool>())) {
        absl::StatusOr<ExprId> e = ConvertSchema(*it, path + "/items");
        if (!e.ok()) return e.status();
        item = *e;
      }
    } else {
      item = AnyValue();
    }
    const int32_t k = static_cast<int32_t>(prefix.size());
    ExprId open = g_.Seq({g_.Byte('['), Ws()});
    ExprId close = g_.Seq({Ws(), g_.Byte(']')});
    if (k > 0) {
      if (*max >= 0 && *max < k) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": maxItems is below the number of prefixItems"));
      }
      std::vector<ExprId> parts{prefix[0]};
      for (int32_t i = 1; i < k; ++i) {
        parts.push_back(Sep(','));
        parts.push_back(prefix[static_cast<size_t>(i)]);
      }
      if (item.has_value()) {
        parts.push_back(
            g_.Repeat(g_.Seq({Sep(','), *item}), std::max(0, *min - k), *max < 0 ? -1 : *max - k));
      } else if (*min > k) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schema ", Where(path), ": minItems is above prefixItems with items false"));
      }
      return g_.Seq({open, g_.Seq(std::move(parts)), close});
    }
    if (!item.has_value() || *max == 0) {
      if (*min > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": no array satisfies minItems"));
      }
      return g_.Seq({open, close});
    }
    ExprId elems = g_.Seq({*item, g_.Repeat(g_.Seq({Sep(','), *item}), std::max(0, *min - 1),
                                            *max < 0 ? -1 : *max - 1)});
    return g_.Seq({open, *min == 0 ? g_.Optional(elems) : elems, close});
  }

  // A JSON string of raw characters (no escapes) that is none of `keys`: the name of an extra
  // property, which must not be a declared one (its value would then have to match that
  // property's schema).
  ExprId KeyExcept(const std::vector<std::string>& keys) {
    const CodepointRanges raw = NegateRanges({{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
    struct Node {
      std::map<uint32_t, int32_t> children;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& key : keys) {
      std::vector<uint32_t> cps;
      bool producible = true;
      for (size_t i = 0; i < key.size() && producible;) {
        const auto b0 = static_cast<uint8_t>(key[i]);
        const int n = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : 4;
        uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
        for (int k = 1; k < n && i + k < key.size(); ++k) {
          cp = (cp << 6) | (static_cast<uint8_t>(key[i + k]) & 0x3F);
        }
        i += static_cast<size_t>(n);
        producible = cp >= 0x20 && cp != '"' && cp != '\\';
        cps.push_back(cp);
      }
      if (!producible) continue;
      int32_t cur = 0;
      for (uint32_t cp : cps) {
        auto it = trie[static_cast<size_t>(cur)].children.find(cp);
        if (it == trie[static_cast<size_t>(cur)].children.end()) {
          trie.emplace_back();
          const int32_t child = static_cast<int32_t>(trie.size() - 1);
          trie[static_cast<size_t>(cur)].children.emplace(cp, child);
          cur = child;
        } else {
          cur = it->second;
        }
      }
      trie[static_cast<size_t>(cur)].terminal = true;
    }
    const ExprId any_rest = g_.Repeat(g_.Codepoints(raw), 0, -1);
    std::function<ExprId(int32_t)> build = [&](int32_t node) -> ExprId {
      const Node& n = trie[static_cast<size_t>(node)];
      std::vector<ExprId> options;
      if (!n.terminal) options.push_back(g_.Empty());
      CodepointRanges taken;
      for (const auto& [cp, child] : n.children) taken.emplace_back(cp, cp);
      CodepointRanges other = NegateRanges(NormalizeRanges([&] {
        CodepointRanges excluded = NegateRanges(raw);
        excluded.insert(excluded.end(), taken.begin(), taken.end());
        return excluded;
      }()));
      if (!other.empty()) options.push_back(g_.Seq({g_.Codepoints(other), any_rest}));
      for (const auto& [cp, child] : n.children) {
        options.push_back(g_.Seq({g_.Codepoints({{cp, cp}}), build(child)}));
      }
      return g_.Alt(std::move(options));
    };
    return g_.Seq({g_.Byte('"'), build(0), g_.Byte('"')});
  }

  absl::StatusOr<ExprId> ObjectSchema(const Json& s, const std::string& path) {
    struct Prop {
      ExprId pair;
      bool required;
    };
    std::vector<Prop> props;
    absl::flat_hash_set<std::string> declared;
    std::vector<std::string> declared_names;
    absl::flat_hash_set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": 'required' must be an array of names"));
      }
      for (const Json& name : *r) {
        if (!name.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("schema ", Where(path), ": 'required' must be an array of names"));
        }
        required.insert(name.get<std::string>());
      }
    }
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": 'properties' must be an object"));
      }
      for (auto it = p->begin(); it != p->end(); ++it) {
        const std::string child = absl::StrCat(path, "/properties/", PointerEscape(it.key()));
        absl::StatusOr<ExprId> value = ConvertSchema(it.value(), child);
        if (!value.ok()) return value.status();
        ExprId key = g_.Literal(Json(it.key()).dump());
        props.push_back({g_.Seq({key, Sep(':'), *value}), required.contains(it.key())});
        declared.insert(it.key());
        declared_names.push_back(it.key());
      }
    }
    for (const std::string& name : required) {
      if (!declared.contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schema ", Where(path), ": required property '", name, "' is not in 'properties'"));
      }
    }
    // Extra properties: absent or false -> none (strict mode); true or a schema -> allowed after
    // the declared ones.
    std::optional<ExprId> extra;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (!(a->is_boolean() && !a->get<bool>())) {
        absl::StatusOr<ExprId> value = ConvertSchema(*a, path + "/additionalProperties");
        if (!value.ok()) return value.status();
        extra = g_.Seq({KeyExcept(declared_names), Sep(':'), *value});
      }
    }
    const size_t n = props.size();
    // rest[i]: properties i.. after something was written (each behind a comma).
    std::vector<ExprId> rest(n + 1);
    rest[n] = extra ? g_.Repeat(g_.Seq({Sep(','), *extra}), 0, -1) : g_.Empty();
    for (size_t i = n; i-- > 0;) {
      ExprId one = g_.Seq({Sep(','), props[i].pair});
      rest[i] = g_.Seq({props[i].required ? one : g_.Optional(one), rest[i + 1]});
    }
    // The first written property: any optional one up to the first required one.
    std::vector<ExprId> first;
    bool any_required = false;
    for (size_t j = 0; j < n; ++j) {
      first.push_back(g_.Seq({props[j].pair, rest[j + 1]}));
      if (props[j].required) {
        any_required = true;
        break;
      }
    }
    if (!any_required && extra) first.push_back(g_.Seq({*extra, rest[n]}));
    ExprId body = g_.Empty();
    if (!first.empty()) body = any_required ? g_.Alt(first) : g_.Optional(g_.Alt(first));
    return g_.Seq({g_.Byte('{'), Ws(), body, Ws(), g_.Byte('}')});
  }

  // Any JSON value: a recursive rule, made once.
  ExprId AnyValue() {
    if (any_rule_ < 0) {
      any_rule_ = g_.AddRule("any_value");
      ExprId v = g_.Ref(any_rule_);
      ExprId str = StringExpr(0, -1);
      ExprId member = g_.Seq({str, Sep(':'), v});
      ExprId object =
          g_.Seq({g_.Byte('{'), Ws(),
                  g_.Optional(g_.Seq({member, g_.Repeat(g_.Seq({Sep(','), member}), 0, -1)})), Ws(),
                  g_.Byte('}')});
      ExprId array = g_.Seq({g_.Byte('['), Ws(),
                             g_.Optional(g_.Seq({v, g_.Repeat(g_.Seq({Sep(','), v}), 0, -1)})),
                             Ws(), g_.Byte(']')});
      g_.SetBody(any_rule_, g_.Alt({object, array, str, UnboundedNumber(), g_.Literal("true"),
                                    g_.Literal("false"), g_.Literal("null")}));
    }
    return g_.Ref(any_rule_);
  }

  ExprId AnyObject() {
    AnyValue();
    ExprId member = g_.Seq({StringExpr(0, -1), Sep(':'), g_.Ref(any_rule_)});
    return g_.Seq({g_.Byte('{'), Ws(),
                   g_.Optional(g_.Seq({member, g_.Repeat(g_.Seq({Sep(','), member}), 0, -1)})),
                   Ws(), g_.Byte('}')});
  }

 private:
  absl::StatusOr<ExprId> RefSchema(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path),
                       ": only local $ref (\"#\" or \"#/...\") is supported, got '", ref, "'"));
    }
    if (auto it = refs_.find(ref); it != refs_.end()) return g_.Ref(it->second);
    const Json* target = root_;
    std::string pointer = ref.substr(1);
    if (!pointer.empty()) {
      if (pointer[0] != '/') {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": $ref '", ref, "' is not a JSON pointer"));
      }
      for (absl::string_view part : absl::StrSplit(pointer.substr(1), '/')) {
        std::string key;
        for (size_t i = 0; i < part.size(); ++i) {
          if (part[i] == '~' && i + 1 < part.size()) {
            key += part[i + 1] == '1' ? '/' : '~';
            ++i;
          } else {
            key += part[i];
          }
        }
        if (target->is_object() && target->contains(key)) {
          target = &(*target)[key];
        } else if (target->is_array() && !key.empty() &&
                   key.find_first_not_of("0123456789") == std::string::npos &&
                   std::stoul(key) < target->size()) {
          target = &(*target)[std::stoul(key)];
        } else {
          return absl::InvalidArgumentError(
              absl::StrCat("schema ", Where(path), ": $ref '", ref, "' points to nothing"));
        }
      }
    }
    const RuleId rule = g_.AddRule(absl::StrCat("ref", ref));
    refs_.emplace(ref, rule);
    absl::StatusOr<ExprId> body = ConvertSchema(*target, pointer);
    if (!body.ok()) return body.status();
    g_.SetBody(rule, *body);
    return g_.Ref(rule);
  }

  absl::StatusOr<ExprId> ConvertSchema(const Json& s, const std::string& path) {
    if (++depth_ > 512) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": nested too deeply"));
    }
    struct Leave {
      int* d;
      ~Leave() { --*d; }
    } leave{&depth_};
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyValue();
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": the schema 'false' allows no value"));
    }
    if (!s.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat("schema ", Where(path), ": a schema must be an object or a boolean"));
    }
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (UnsupportedKeywords().contains(it.key())) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": keyword '", it.key(), "' is not supported"));
      }
    }
    if (auto ref = s.find("$ref"); ref != s.end()) {
      if (!ref->is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": '$ref' must be a string"));
      }
      return RefSchema(ref->get<std::string>(), path);
    }
    if (auto c = s.find("const"); c != s.end()) return g_.Literal(c->dump());
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": 'enum' must be a non-empty array"));
      }
      std::vector<ExprId> options;
      for (const Json& v : *e) options.push_back(g_.Literal(v.dump()));
      return g_.Alt(std::move(options));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto a = s.find(key);
      if (a == s.end()) continue;
      if (!a->is_array() || a->empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": '", key, "' must be a non-empty array"));
      }
      for (const char* sibling : {"type", "properties", "items", "enum", "const", "allOf"}) {
        if (s.contains(sibling)) {
          return absl::InvalidArgumentError(
              absl::StrCat("schema ", Where(path), ": '", key, "' together with '", sibling,
                           "' is not supported; move it into each alternative"));
        }
      }
      std::vector<ExprId> options;
      for (size_t i = 0; i < a->size(); ++i) {
        absl::StatusOr<ExprId> o = ConvertSchema((*a)[i], absl::StrCat(path, "/", key, "/", i));
        if (!o.ok()) return o.status();
        options.push_back(*o);
      }
      return g_.Alt(std::move(options));
    }
    if (auto a = s.find("allOf"); a != s.end()) {
      if (!a->is_array() || a->size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schema ", Where(path), ": 'allOf' is supported with exactly one schema only"));
      }
      return ConvertSchema((*a)[0], path + "/allOf/0");
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const Json& x : *t) {
          if (!x.is_string()) {
            return absl::InvalidArgumentError(
                absl::StrCat("schema ", Where(path), ": 'type' must be a string or strings"));
          }
          types.push_back(x.get<std::string>());
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": 'type' must be a string or strings"));
      }
    } else if (s.contains("properties") || s.contains("required") ||
               s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      types.push_back("array");
    } else if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") ||
               s.contains("format")) {
      types.push_back("string");
    } else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
               s.contains("exclusiveMaximum")) {
      types.push_back("number");
    } else {
      return AnyValue();
    }
    std::vector<ExprId> options;
    for (const std::string& t : types) {
      absl::StatusOr<ExprId> e;
      if (t == "object") {
        e = ObjectSchema(s, path);
      } else if (t == "array") {
        e = ArraySchema(s, path);
      } else if (t == "string") {
        e = StringSchema(s, path);
      } else if (t == "integer") {
        e = IntegerSchema(s, path);
      } else if (t == "number") {
        e = NumberSchema(s, path);
      } else if (t == "boolean") {
        e = g_.Alt({g_.Literal("true"), g_.Literal("false")});
      } else if (t == "null") {
        e = g_.Literal("null");
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("schema ", Where(path), ": unknown type '", t, "'"));
      }
      if (!e.ok()) return e.status();
      options.push_back(*e);
    }
    return g_.Alt(std::move(options));
  }

  const JsonGrammarOptions o_;
  Grammar& g_;
  const Json* root_ = nullptr;
  absl::flat_hash_map<std::string, RuleId> refs_;
  RuleId any_rule_ = -1;
  int depth_ = 0;
};

}  // namespace

absl::StatusOr<Grammar> JsonSchemaToGrammar(std::string_view schema_json,
                                            const JsonGrammarOptions& options) {
  Json schema = Json::parse(schema_json, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError("schema: not valid JSON");
  }
  Grammar g;
  const RuleId root = g.AddRule("root");
  SchemaConverter converter(options, &g);
  absl::StatusOr<ExprId> body = converter.Convert(schema, schema, "");
  if (!body.ok()) return body.status();
  g.SetBody(root, *body);
  g.set_root(root);
  return g;
}

Grammar JsonObjectGrammar(const JsonGrammarOptions& options) {
  Grammar g;
  const RuleId root = g.AddRule("root");
  SchemaConverter converter(options, &g);
  g.SetBody(root, converter.AnyObject());
  g.set_root(root);
  return g;
}

absl::StatusOr<Grammar> ConstraintToGrammar(const generation::Constraint& constraint,
                                            const JsonGrammarOptions& options) {
  if (absl::Status s = constraint.Validate(); !s.ok()) return s;
  switch (constraint.kind) {
    case generation::ConstraintKind::kJsonObject:
      return JsonObjectGrammar(options);
    case generation::ConstraintKind::kJsonSchema:
      return JsonSchemaToGrammar(constraint.spec, options);
    case generation::ConstraintKind::kRegex: {
      Grammar g;
      const RuleId root = g.AddRule("root");
      absl::StatusOr<ExprId> body = RegexToExpr(constraint.spec, RegexContext::kRaw, &g);
      if (!body.ok()) return body.status();
      g.SetBody(root, *body);
      g.set_root(root);
      return g;
    }
    case generation::ConstraintKind::kChoice: {
      Grammar g;
      const RuleId root = g.AddRule("root");
      std::vector<ExprId> options_list;
      for (const std::string& c : constraint.choices) options_list.push_back(g.Literal(c));
      g.SetBody(root, g.Alt(std::move(options_list)));
      g.set_root(root);
      return g;
    }
    case generation::ConstraintKind::kNone:
      break;
  }
  return absl::InvalidArgumentError("no constraint to compile");
}

}  // namespace moe::grammar
