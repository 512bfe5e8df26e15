// Finding a service's listening line (DESIGN.md §3): a service started with port 0 prints, once,
// on stdout, `{"event":"listening","grpc":P,"http":Q,"metrics":R}` with the ports it has
// (common/grpc/listening.h writes it). Launchers and tests read it here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"

namespace moe::common::process {

// The ports a listening line names; nullopt for those the service does not have.
struct ListeningPorts {
  std::optional<int> grpc;
  std::optional<int> http;
  std::optional<int> metrics;
};

// kInvalidArgument unless `line` is a JSON object with "event": "listening" whose ports, where
// present, are integers in [1, 65535].
absl::StatusOr<ListeningPorts> ParseListeningLine(std::string_view line);

// Reads `child`'s stdout up to its listening line and returns its ports. Earlier lines go to
// `on_other_line` (when set). kDeadlineExceeded: none within `timeout`; kOutOfRange: stdout
// ended first (the child exited; its exit code is in the message when it is known).
absl::StatusOr<ListeningPorts> WaitForListeningLine(
    ChildProcess& child, absl::Duration timeout,
    const std::function<void(const std::string&)>& on_other_line = nullptr);

}  // namespace moe::common::process
