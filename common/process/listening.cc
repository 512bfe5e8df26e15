#include "common/process/listening.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace moe::common::process {

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
