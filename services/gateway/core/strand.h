// Runs closures one at a time, in the order posted, on whichever thread posted while none was
// running (an Asio strand without an executor). The realtime session runs everything through
// one: WebSocket messages, ASR / LLM / TTS callbacks and timers then touch its state from one
// logical thread, and a backend that calls an observer inline (from inside a call the session
// made) only queues the work instead of deadlocking on a lock.
//
// Thread-safe. Closures must not block.
#pragma once

#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace moe::gateway {

class Strand {
 public:
  void Post(std::function<void()> fn) {
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(fn));
      if (running_) return;
      running_ = true;
    }
    for (;;) {
      std::function<void()> next;
      {
        absl::MutexLock lock(&mu_);
        if (queue_.empty()) {
          running_ = false;
          return;
        }
        next = std::move(queue_.front());
        queue_.pop_front();
      }
      next();
    }
  }

 private:
  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe::gateway
