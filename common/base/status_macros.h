// RETURN_IF_ERROR / ASSIGN_OR_RETURN with abseil semantics (abseil 20220623 ships neither).
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::common::internal {
inline absl::Status AsStatus(absl::Status s) { return s; }
template <typename T>
absl::Status AsStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace moe::common::internal

#define MOE_STATUS_CONCAT_INNER_(a, b) a##b
#define MOE_STATUS_CONCAT_(a, b) MOE_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (absl::Status or absl::StatusOr<T>) and returns its status from the
// enclosing function when it is not OK.
#define RETURN_IF_ERROR(expr)                                             \
  do {                                                                    \
    absl::Status moe_status_ = ::moe::common::internal::AsStatus((expr)); \
    if (!moe_status_.ok()) return moe_status_;                            \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>); on error returns its
// status, else moves the value into `lhs` (which may be a declaration: `auto x`).
#define ASSIGN_OR_RETURN(lhs, expr) \
  MOE_ASSIGN_OR_RETURN_IMPL_(MOE_STATUS_CONCAT_(moe_statusor_, __LINE__), lhs, expr)
#define MOE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr)    \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
