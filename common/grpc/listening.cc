#include "common/grpc/listening.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace moe::common::rpc {

std::string ListeningLine(const ListeningPorts& ports) {
  std::string out = "{\"event\":\"listening\"";
  if (ports.grpc) absl::StrAppend(&out, ",\"grpc\":", *ports.grpc);
  if (ports.http) absl::StrAppend(&out, ",\"http\":", *ports.http);
  if (ports.metrics) absl::StrAppend(&out, ",\"metrics\":", *ports.metrics);
  out += "}";
  return out;
}

void PrintListeningLine(const ListeningPorts& ports) {
  const std::string line = ListeningLine(ports) + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

}  // namespace moe::common::rpc
