// Termination signals for service mains: SIGTERM (Kubernetes) and SIGINT (Ctrl-C) start a
// graceful drain instead of killing the process.
//
//   int main(int argc, char** argv) {
//     rpc::BlockTerminationSignals();   // First, before any thread exists.
//     ... load options, start servers, SetServing(true) ...
//     const int signo = rpc::WaitForTerminationSignal();
//     runner.Shutdown();                 // Drains within options.drain_timeout.
//     return 0;
//   }
//
// Signals are blocked in every thread (threads inherit the mask of the thread that starts
// them) and taken synchronously with sigwait, so no async-signal-safety constraints apply.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

#include "absl/status/status.h"

namespace moe::common::rpc {

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread it starts afterwards.
// REQUIRES: called before any other thread is started (else one of those could take the signal
// and die by its default action).
void BlockTerminationSignals();

// The whole `main` of a service: blocks the termination signals (before any thread exists),
// runs `run`, and turns its status into the exit code every service uses: 0 on OK, 2 for
// INVALID_ARGUMENT (bad flags or config; the message names the key), 1 otherwise, with the
// error logged as "<name>: <status>".
int ServiceMain(const char* name, int argc, char** argv, absl::Status (*run)(int, char**));

// Blocks until SIGTERM or SIGINT is delivered to the process; returns its number.
// REQUIRES: BlockTerminationSignals() earlier.
int WaitForTerminationSignal();

// Runs `on_signal(signo)` on its own thread when SIGTERM or SIGINT arrives (once), for mains
// whose own thread is busy. REQUIRES: BlockTerminationSignals() before any thread started.
class TerminationWatcher {
 public:
  explicit TerminationWatcher(std::function<void(int)> on_signal);
  // Stops watching (without calling on_signal if no signal came) and joins the thread.
  ~TerminationWatcher();
  TerminationWatcher(const TerminationWatcher&) = delete;
  TerminationWatcher& operator=(const TerminationWatcher&) = delete;

 private:
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace moe::common::rpc
