// CHECK for unrecoverable environment failures, DCHECK for provable internal invariants.
// Never CHECK request data or peer responses: return an absl::Status instead (STYLE.md rule 4).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

namespace moe::common::internal {
[[noreturn]] inline void CheckFailed(const char* file, int line, const char* cond,
                                     const char* msg) {
  std::fprintf(stderr, "%s:%d: CHECK failed: %s %s\n", file, line, cond, msg ? msg : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace moe::common::internal

#define MOE_CHECK(cond)                                                         \
  do {                                                                          \
    if (__builtin_expect(!(cond), 0))                                           \
      ::moe::common::internal::CheckFailed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)
#define MOE_CHECK_MSG(cond, msg)                                              \
  do {                                                                        \
    if (__builtin_expect(!(cond), 0))                                         \
      ::moe::common::internal::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
// Aborts when `status_expr` is not OK (startup / environment failures only).
#define MOE_CHECK_OK(status_expr)                                                              \
  do {                                                                                         \
    auto moe_check_status_ = (status_expr);                                                    \
    if (!moe_check_status_.ok())                                                               \
      ::moe::common::internal::CheckFailed(__FILE__, __LINE__, #status_expr,                   \
                                           std::string(moe_check_status_.ToString()).c_str()); \
  } while (0)

#ifdef NDEBUG
#define MOE_DCHECK(cond) \
  do {                   \
    (void)sizeof(cond);  \
  } while (0)
#else
#define MOE_DCHECK(cond) MOE_CHECK(cond)
#endif

// Short names, as the style guide writes them.
#ifndef CHECK
#define CHECK(cond) MOE_CHECK(cond)
#endif
#ifndef DCHECK
#define DCHECK(cond) MOE_DCHECK(cond)
#endif
