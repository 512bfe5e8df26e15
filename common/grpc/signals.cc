#include "common/grpc/signals.h"

#include <pthread.h>
#include <signal.h>

#include <utility>

#include "common/base/check.h"
#include "common/base/log.h"

namespace moe::common::rpc {
namespace {

sigset_t TerminationSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace

int ServiceMain(const char* name, int argc, char** argv, absl::Status (*run)(int, char**)) {
  BlockTerminationSignals();
  const absl::Status status = run(argc, argv);
  if (status.ok()) return 0;
  MOE_LOG_ERROR("{}: {}", name, status.ToString());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

void BlockTerminationSignals() {
  const sigset_t set = TerminationSet();
  MOE_CHECK(pthread_sigmask(SIG_BLOCK, &set, nullptr) == 0);
}

int WaitForTerminationSignal() {
  const sigset_t set = TerminationSet();
  int signo = 0;
  MOE_CHECK(sigwait(&set, &signo) == 0);
  return signo;
}

TerminationWatcher::TerminationWatcher(std::function<void(int)> on_signal)
    : thread_([this, on_signal = std::move(on_signal)] {
        const int signo = WaitForTerminationSignal();
        if (!stopping_.load()) on_signal(signo);
      }) {}

TerminationWatcher::~TerminationWatcher() {
  stopping_.store(true);
  // Wake the sigwait: a signal aimed at that thread, where it is blocked and so only pending
  // until sigwait takes it. If a real signal already woke it, this one stays pending, harmless.
  pthread_kill(thread_.native_handle(), SIGTERM);
  thread_.join();
}

}  // namespace moe::common::rpc
