// The "listening" line of DESIGN.md §3: a service started with port 0 prints, once, on stdout,
//   {"event":"listening","grpc":P,"http":Q,"metrics":R}
// with only the ports it has, so launchers and tests find it (logs go to stderr, never here).
// Services write it with PrintListeningLine; launchers read it with ParseListeningLine
// (common/process/listening.h waits for it on a child's stdout).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moe::common {

// The ports a listening line names; nullopt for those the service does not have.
struct ListeningPorts {
  std::optional<int> grpc;
  std::optional<int> http;
  std::optional<int> metrics;
};

// The JSON line without the newline, keys in the order grpc, http, metrics.
std::string ListeningLine(const ListeningPorts& ports);
// Writes ListeningLine + "\n" to stdout and flushes (stdout may be a pipe, so block-buffered).
void PrintListeningLine(const ListeningPorts& ports);

// kInvalidArgument unless `line` is a JSON object with "event": "listening" whose ports, where
// present, are integers in [1, 65535].
absl::StatusOr<ListeningPorts> ParseListeningLine(std::string_view line);

}  // namespace moe::common
