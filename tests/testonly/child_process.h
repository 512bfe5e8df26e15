// A child process for integration tests: spawned with its stdout on a pipe (read line by line
// with a timeout) and its stderr in a file (read after it exits). Signals and waits use a pidfd,
// so no polling loops or sleeps.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace moe::testonly {

class ChildProcess {
 public:
  // Starts `argv[0]` (a path) with `argv`. The child's stderr goes to `stderr_path`.
  static absl::StatusOr<ChildProcess> Spawn(const std::vector<std::string>& argv,
                                            const std::string& stderr_path);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  // Kills (SIGKILL) and reaps the child if it is still running.
  ~ChildProcess();

  // The next line of the child's stdout without the newline. kDeadlineExceeded after `timeout`;
  // kOutOfRange at end of output (the child closed stdout or exited).
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // Sends `signo` to the child.
  void Signal(int signo);
  // Waits for the child to exit; returns its exit code (128 + signal when killed by one).
  // kDeadlineExceeded after `timeout` (the child keeps running).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // The child's stderr so far.
  std::string Stderr() const;
  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int stdout_fd, int pidfd, std::string stderr_path)
      : pid_(pid), stdout_fd_(stdout_fd), pidfd_(pidfd), stderr_path_(std::move(stderr_path)) {}

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  int pidfd_ = -1;
  std::string stderr_path_;
  std::string buffered_;          // Read from stdout, not yet returned.
  std::optional<int> exit_code_;  // Set once reaped.
};

}  // namespace moe::testonly
