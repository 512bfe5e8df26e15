// A TimerQueue for tests: callbacks run only when the test calls RunDue(now) (with a FakeClock's
// time), on the test's thread.
#pragma once

#include <functional>
#include <map>

#include "absl/synchronization/mutex.h"
#include "services/gateway/core/timer_queue.h"

namespace moe::gateway::testing {

class ManualTimerQueue final : public TimerQueue {
 public:
  void RunAt(absl::Time when, std::function<void()> fn) override {
    absl::MutexLock lock(&mu_);
    due_.emplace(when, std::move(fn));
  }
  // Runs every callback due at `now` (including ones they schedule for `now`); returns how many.
  int RunDue(absl::Time now) {
    int n = 0;
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu_);
        if (due_.empty() || due_.begin()->first > now) return n;
        fn = std::move(due_.begin()->second);
        due_.erase(due_.begin());
      }
      fn();
      ++n;
    }
  }
  size_t pending() const {
    absl::MutexLock lock(&mu_);
    return due_.size();
  }

 private:
  mutable absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> due_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::gateway::testing
