// Oracles (node + the pinned npm packages in tests/js) that a test cannot run without. A missing
// oracle FAILS the test everywhere; MOE_ALLOW_MISSING_ORACLES=1 turns that into a skip that says
// so on stderr, for a machine that knowingly lacks them.
//
//   if (auto reason = OracleUnavailableReason()) MOE_MISSING_ORACLE(*reason);
#pragma once

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "gtest/gtest.h"

namespace moe::common::testing {

inline bool AllowMissingOracles() {
  const char* v = std::getenv("MOE_ALLOW_MISSING_ORACLES");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace moe::common::testing

// Ends the current test: a failure, or with MOE_ALLOW_MISSING_ORACLES=1 a loud skip.
#define MOE_MISSING_ORACLE(reason)                                                            \
  do {                                                                                        \
    const std::string moe_oracle_reason_ = (reason);                                          \
    if (::moe::common::testing::AllowMissingOracles()) {                                      \
      std::cerr << "WARNING: oracle missing, test SKIPPED because "                           \
                   "MOE_ALLOW_MISSING_ORACLES=1: "                                            \
                << moe_oracle_reason_ << "\n";                                                \
      GTEST_SKIP() << "oracle missing (MOE_ALLOW_MISSING_ORACLES=1): " << moe_oracle_reason_; \
    }                                                                                         \
    GTEST_FAIL() << "oracle missing: " << moe_oracle_reason_                                  \
                 << " (run scripts/setup, or set MOE_ALLOW_MISSING_ORACLES=1 to skip)";       \
  } while (0)
