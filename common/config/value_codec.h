// Text <-> value conversion for config fields: one Codec<T> per supported field type.
// Internal to common/config; Options structs never name these.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace moe::common::config::internal {

// Accepts true/false, yes/no, on/off, 1/0 (any case).
bool ParseBool(absl::string_view text, bool* out);
// Shortest text that parses back to exactly `v`.
std::string FormatDouble(double v);

template <typename T, typename = void>
struct Codec;  // Undefined for unsupported types: a compile error names the field type.

template <>
struct Codec<bool> {
  static std::string TypeName() { return "bool"; }
  static bool Parse(absl::string_view text, bool* out) { return ParseBool(text, out); }
  static std::string Format(bool v) { return v ? "true" : "false"; }
};

template <typename T>
struct Codec<T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>>> {
  static std::string TypeName() {
    return std::string(std::is_signed_v<T> ? "int" : "uint") + std::to_string(8 * sizeof(T));
  }
  static bool Parse(absl::string_view text, T* out) {
    if constexpr (sizeof(T) < 4) {
      int32_t wide;
      if (!absl::SimpleAtoi(text, &wide)) return false;
      if (wide < std::numeric_limits<T>::min() || wide > std::numeric_limits<T>::max())
        return false;
      *out = static_cast<T>(wide);
      return true;
    } else {
      return absl::SimpleAtoi(text, out);
    }
  }
  static std::string Format(T v) { return std::to_string(v); }
};

template <typename T>
struct Codec<T, std::enable_if_t<std::is_floating_point_v<T>>> {
  static std::string TypeName() { return sizeof(T) == 4 ? "float" : "double"; }
  static bool Parse(absl::string_view text, T* out) {
    double d;
    if (!absl::SimpleAtod(text, &d) || !std::isfinite(d)) {
      return false;
    }
    *out = static_cast<T>(d);
    return true;
  }
  static std::string Format(T v) { return FormatDouble(static_cast<double>(v)); }
};

template <>
struct Codec<std::string> {
  static std::string TypeName() { return "string"; }
  static bool Parse(absl::string_view text, std::string* out) {
    *out = std::string(text);
    return true;
  }
  static std::string Format(const std::string& v) { return v; }
};

// Durations are written with a unit: "10s", "250ms", "1m30s", "1.5s".
template <>
struct Codec<absl::Duration> {
  static std::string TypeName() { return "duration"; }
  static bool Parse(absl::string_view text, absl::Duration* out) {
    return absl::ParseDuration(text, out) && *out != absl::InfiniteDuration() &&
           *out != -absl::InfiniteDuration();
  }
  static std::string Format(absl::Duration v) { return absl::FormatDuration(v); }
};

// Lists: a YAML sequence, or on the command line a comma-separated string ("" is the empty list).
template <typename T>
struct Codec<std::vector<T>> {
  static std::string TypeName() { return "list<" + Codec<T>::TypeName() + ">"; }
  static bool ParseItems(const std::vector<std::string>& items, std::vector<T>* out) {
    std::vector<T> parsed(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      T item{};
      if (!Codec<T>::Parse(items[i], &item)) return false;
      parsed[i] = std::move(item);
    }
    *out = std::move(parsed);
    return true;
  }
  static bool Parse(absl::string_view text, std::vector<T>* out) {
    std::vector<std::string> items;
    if (!text.empty()) {
      items = absl::StrSplit(text, ',');
    }
    for (std::string& item : items) {
      item = std::string(absl::StripAsciiWhitespace(item));
    }
    return ParseItems(items, out);
  }
  static std::string Format(const std::vector<T>& v) {
    return absl::StrJoin(
        v, ",", [](std::string* out, const T& item) { out->append(Codec<T>::Format(item)); });
  }
};

// ElemOf<V>::type: T for std::vector<T>, else V; ElemOf<V>::kIsList.
template <typename V>
struct ElemOf {
  using type = V;
  static constexpr bool kIsList = false;
};
template <typename T>
struct ElemOf<std::vector<T>> {
  using type = T;
  static constexpr bool kIsList = true;
};

}  // namespace moe::common::config::internal
