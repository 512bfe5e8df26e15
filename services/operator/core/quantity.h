// Kubernetes scalar formats the CRDs use: resource quantities ("256Mi", "1G", "500m") and
// durations ("300s", "1m30s", "1.5h").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace moe::op {

// A quantity in base units, rounded up to an integer: binary suffixes Ki..Ei, decimal k..E,
// m (milli), plain numbers and exponents ("1e3"). INVALID_ARGUMENT naming the text otherwise,
// or for a negative or overflowing value.
absl::StatusOr<int64_t> ParseQuantity(std::string_view text);

// A Go/CRD duration: a sequence of <number><unit>, units ms, s, m, h (also us, ns).
// INVALID_ARGUMENT naming the text otherwise, or for a negative one.
absl::StatusOr<absl::Duration> ParseDuration(std::string_view text);

// "300s", "1m30s", "250ms": the shortest absl form (FormatDuration) for status messages.
std::string FormatDuration(absl::Duration d);

}  // namespace moe::op
