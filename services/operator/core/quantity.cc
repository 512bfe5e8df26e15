#include "services/operator/core/quantity.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

namespace moe::op {

absl::StatusOr<int64_t> ParseQuantity(std::string_view text) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("bad quantity \"", std::string(text), "\""));
  };
  if (text.empty()) return bad();
  const std::string s(text);
  char* end = nullptr;
  const double number = std::strtod(s.c_str(), &end);
  if (end == s.c_str()) return bad();
  const std::string suffix(end);
  struct Suffix {
    const char* name;
    double factor;
  };
  static constexpr Suffix kSuffixes[] = {{"", 1},
                                         {"m", 1e-3},
                                         {"k", 1e3},
                                         {"M", 1e6},
                                         {"G", 1e9},
                                         {"T", 1e12},
                                         {"P", 1e15},
                                         {"E", 1e18},
                                         {"Ki", 1024.0},
                                         {"Mi", 1048576.0},
                                         {"Gi", 1073741824.0},
                                         {"Ti", 1099511627776.0},
                                         {"Pi", 1125899906842624.0},
                                         {"Ei", 1152921504606846976.0}};
  for (const Suffix& x : kSuffixes) {
    if (suffix != x.name) continue;
    const double v = std::ceil(number * x.factor);
    if (!(v >= 0) || v > 9.2e18) return bad();
    return static_cast<int64_t>(v);
  }
  return bad();
}

absl::StatusOr<absl::Duration> ParseDuration(std::string_view text) {
  absl::Duration d;
  if (text.empty() || !absl::ParseDuration(std::string(text), &d) || d < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("bad duration \"", std::string(text), "\""));
  }
  return d;
}

std::string FormatDuration(absl::Duration d) { return absl::FormatDuration(d); }

}  // namespace moe::op
