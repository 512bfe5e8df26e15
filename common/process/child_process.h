// One child process: started with posix_spawn (no fork of a threaded parent; the child starts
// with an empty signal mask and default dispositions, whatever the parent blocked or handled),
// watched through a pidfd (waits with deadlines and signals without polling or sleeping, and
// never to a recycled pid).
//
// The child's stdout is on a pipe: read it line by line with a deadline (ReadLine; a service's
// listening line, listening.h), then hand the rest to ForwardStdout (copied to a descriptor) or
// DrainStdout (discarded), so that the child never blocks on a full pipe. Its stderr goes to a
// file or is this process's own.
//
//   ASSIGN_OR_RETURN(auto child, ChildProcess::Spawn({.argv = {"/bin/echo", "hi"}}));
//   ASSIGN_OR_RETURN(std::string line, child->ReadLine(absl::Seconds(5)));   // "hi"
//   ASSIGN_OR_RETURN(int code, child->Wait(absl::Seconds(5)));               // 0
//
// Thread-safety: the stdout calls (ReadLine, ReadToEnd, ForwardStdout, DrainStdout) are for one
// thread at a time; Signal, TryWait, Wait, Stop, PeakRssBytes and Stderr may be called from any
// thread, concurrently with each other and with the stdout calls.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace moe::common::process {

struct SpawnOptions {
  // argv[0] is the program's path (no PATH search); the rest are its arguments. Not empty.
  std::vector<std::string> argv;
  // The child's whole environment ("NAME=value" entries); nullopt = a copy of this process's.
  std::optional<std::vector<std::string>> env;
  // The child's stderr: a file (created, or truncated when it exists), or "" = this process's.
  std::string stderr_path;
};

class ChildProcess {
 public:
  // Starts the child. kInvalidArgument: empty argv; kNotFound: argv[0] does not exist;
  // kInternal: any other failure to start it (the errno text in the message).
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const SpawnOptions& options);

  // Kills (SIGKILL) and reaps the child if it still runs; stops forwarding its stdout (what the
  // child wrote before it died is still copied).
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // --- stdout ---

  // The next line of stdout without its newline. kDeadlineExceeded after `timeout` (the
  // partial line stays buffered for the next call); kOutOfRange once stdout ended (the child
  // closed it or exited) with no complete line left; kFailedPrecondition after ForwardStdout.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);
  // All of stdout not read yet, up to its end. kDeadlineExceeded after `timeout` (what was
  // read so far is lost); kFailedPrecondition after ForwardStdout.
  absl::StatusOr<std::string> ReadToEnd(absl::Duration timeout);
  // From now on a thread of this object copies stdout (what ReadLine buffered first) to `fd`,
  // or discards it when `fd` < 0, until the child closes stdout or this object is destroyed.
  // `fd` is not owned and must stay open that long. Call at most once.
  void ForwardStdout(int fd);
  void DrainStdout() { ForwardStdout(-1); }

  // --- lifecycle ---

  // Sends `signo`; a no-op once the child has exited.
  void Signal(int signo);
  // The exit code once the child has exited (128 + the signal when a signal killed it),
  // reaping it; nullopt while it runs. Never blocks.
  std::optional<int> TryWait();
  // Waits for the child to exit; returns TryWait's exit code. kDeadlineExceeded after `timeout`
  // (the child keeps running). absl::InfiniteDuration() waits for ever.
  absl::StatusOr<int> Wait(absl::Duration timeout);

  struct Stopped {
    int exit_code = 0;
    bool killed = false;  // it outlived `grace` and got SIGKILL
  };
  // SIGTERM, then SIGKILL if it has not exited within `grace`; returns once it is reaped. At
  // once when it has exited already.
  Stopped Stop(absl::Duration grace);

  // A descriptor that turns readable when the child exits, for poll() over several children.
  // Owned by this object.
  int exit_fd() const { return pidfd_; }

  // The child's peak resident set in bytes: VmHWM while it runs, its rusage maximum once it is
  // reaped; 0 when unknown (an exited child not reaped yet).
  int64_t PeakRssBytes() const;
  // The stderr file's content so far; "" when stderr is inherited.
  std::string Stderr() const;

 private:
  ChildProcess(pid_t pid, int pidfd, int stdout_fd, std::string stderr_path);
  // Reaps the child if it has exited (or, with `block`, once it does). REQUIRES: mu_ held.
  void ReapLocked(bool block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reads what is available on stdout into buffered_, waiting until `deadline`. false: no byte
  // came in time; sets stdout_ended_ at end of stdout.
  bool Fill(absl::Time deadline);
  void Pump(int fd);  // the ForwardStdout thread

  // Constant after construction.
  const pid_t pid_;
  const int pidfd_;
  const std::string stderr_path_;

  // Used by the stdout caller's thread, then (after ForwardStdout) by the pump thread only.
  int stdout_fd_;
  std::string buffered_;  // read from stdout, not returned yet
  bool stdout_ended_ = false;
  std::thread pump_;
  int pump_wake_fd_ = -1;  // eventfd: the destructor tells the pump to finish

  mutable absl::Mutex mu_;
  std::optional<int> exit_code_ ABSL_GUARDED_BY(mu_);  // set once reaped
  int64_t reaped_max_rss_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Runs a child to its end: its whole stdout and its exit code. kDeadlineExceeded when it is
// not done within `timeout` (it is killed); Spawn's errors.
struct RunResult {
  int exit_code = 0;
  std::string stdout_text;
};
absl::StatusOr<RunResult> RunToExit(const SpawnOptions& options, absl::Duration timeout);

}  // namespace moe::common::process
