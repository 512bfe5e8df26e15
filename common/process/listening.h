// Waiting for a child's listening line (DESIGN.md §3; the line itself:
// common/base/listening_line.h).
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/listening_line.h"
#include "common/process/child_process.h"

namespace moe::common::process {

// Reads `child`'s stdout up to its listening line and returns its ports. Earlier lines go to
// `on_other_line` (when set). kDeadlineExceeded: none within `timeout`; kOutOfRange: stdout
// ended first (the child exited; its exit code is in the message when it is known).
absl::StatusOr<ListeningPorts> WaitForListeningLine(
    ChildProcess& child, absl::Duration timeout,
    const std::function<void(const std::string&)>& on_other_line = nullptr);

}  // namespace moe::common::process
