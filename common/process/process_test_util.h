// What the process tests share: a generous deadline and a child running a shell script.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "common/process/child_process.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::common::process::testing {

// Generous: these are deadlines for things that take milliseconds, never waits.
inline constexpr absl::Duration kLong = absl::Seconds(30);

// `/bin/sh -c script`, its stderr to `stderr_path` when set; nullptr (and a test failure) when
// it cannot start.
inline std::unique_ptr<ChildProcess> Shell(const std::string& script,
                                           std::string stderr_path = "") {
  auto child = ChildProcess::Spawn(
      {.argv = {"/bin/sh", "-c", script}, .stderr_path = std::move(stderr_path)});
  EXPECT_OK(child.status());
  return child.ok() ? *std::move(child) : nullptr;
}

}  // namespace moe::common::process::testing
