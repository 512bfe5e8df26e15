// The "listening" line of DESIGN.md §3: a service started with port 0 prints, once, on stdout,
//   {"event":"listening","grpc":P,"http":Q,"metrics":R}
// with only the ports it has, so launchers and tests find it. Logs go to stderr, never here.
#pragma once

#include <optional>
#include <string>

namespace moe::common::rpc {

struct ListeningPorts {
  std::optional<int> grpc;
  std::optional<int> http;
  std::optional<int> metrics;
};

// The JSON line without the newline, keys in the order grpc, http, metrics.
std::string ListeningLine(const ListeningPorts& ports);
// Writes ListeningLine + "\n" to stdout and flushes (stdout may be a pipe, so block-buffered).
void PrintListeningLine(const ListeningPorts& ports);

}  // namespace moe::common::rpc
