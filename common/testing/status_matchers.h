// gMock matchers for absl::Status / StatusOr: IsOk(), StatusIs(code[, message_matcher]),
// IsOkAndHolds(matcher). Also EXPECT_OK / ASSERT_OK.
#pragma once

#include <ostream>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::testing {
namespace internal {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

MATCHER(IsOk, "is OK") {
  const absl::Status& s = internal::GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P(StatusIs, code, "has status code " + std::string(absl::StatusCodeToString(code))) {
  const absl::Status& s = internal::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has status code " + std::string(absl::StatusCodeToString(code))) {
  const absl::Status& s = internal::GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a value that matches") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace moe::common::testing

#define EXPECT_OK(expr) EXPECT_THAT((expr), ::moe::common::testing::IsOk())
#define ASSERT_OK(expr) ASSERT_THAT((expr), ::moe::common::testing::IsOk())
// ASSERT_OK_AND_ASSIGN(auto x, StatusOr-expr);
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  MOE_ASSERT_OK_AND_ASSIGN_IMPL_(MOE_TESTING_CONCAT_(moe_sor_, __LINE__), lhs, expr)
#define MOE_TESTING_CONCAT_INNER_(a, b) a##b
#define MOE_TESTING_CONCAT_(a, b) MOE_TESTING_CONCAT_INNER_(a, b)
#define MOE_ASSERT_OK_AND_ASSIGN_IMPL_(sor, lhs, expr) \
  auto sor = (expr);                                   \
  ASSERT_TRUE(sor.ok()) << sor.status();               \
  lhs = std::move(sor).value()
