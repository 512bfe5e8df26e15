// Test helpers for the filesystem and loopback networking.
#pragma once

#include <string>

namespace moe::common::testing {

// A TCP port on 127.0.0.1 that was free a moment ago (prefer binding port 0 where the code allows).
int PickFreePort();

// A fresh, empty directory under TEST_TMPDIR or /tmp, removed by the caller (or left for
// debugging).
std::string MakeTempDir(const std::string& prefix = "moe_test");

}  // namespace moe::common::testing
