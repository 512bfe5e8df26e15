#include "common/process/listening.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moe::common::process {

absl::StatusOr<ListeningPorts> ParseListeningLine(std::string_view line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("event") || j["event"] != "listening") {
    return absl::InvalidArgumentError(absl::StrCat("not a listening line: ", std::string(line)));
  }
  ListeningPorts ports;
  for (auto [key, port] : {std::pair{"grpc", &ports.grpc}, std::pair{"http", &ports.http},
                           std::pair{"metrics", &ports.metrics}}) {
    if (!j.contains(key)) continue;
    const nlohmann::json& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("listening line: bad ", key, " port: ", std::string(line)));
    }
    *port = v.get<int>();
  }
  return ports;
}

absl::StatusOr<ListeningPorts> WaitForListeningLine(
    ChildProcess& child, absl::Duration timeout,
    const std::function<void(const std::string&)>& on_other_line) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    absl::StatusOr<std::string> line = child.ReadLine(deadline - absl::Now());
    if (absl::IsOutOfRange(line.status())) {
      // Stdout ends as the child exits; give the exit a moment to be reapable.
      absl::StatusOr<int> code = child.Wait(absl::Seconds(1));
      return absl::OutOfRangeError(
          code.ok() ? absl::StrCat("exited with code ", *code, " before its listening line")
                    : "closed its stdout before its listening line");
    }
    if (absl::IsDeadlineExceeded(line.status())) {
      return absl::DeadlineExceededError("printed no listening line in time");
    }
    if (!line.ok()) return line.status();
    absl::StatusOr<ListeningPorts> ports = ParseListeningLine(*line);
    if (ports.ok()) return ports;
    if (on_other_line) on_other_line(*line);
  }
}

}  // namespace moe::common::process
