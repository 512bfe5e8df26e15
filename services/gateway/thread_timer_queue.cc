#include "services/gateway/thread_timer_queue.h"

namespace moe::gateway {

ThreadTimerQueue::ThreadTimerQueue(common::Clock& clock)
    : clock_(clock), thread_([this] { Loop(); }) {}

ThreadTimerQueue::~ThreadTimerQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ThreadTimerQueue::RunAt(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  due_.emplace(when, std::move(fn));
}

void ThreadTimerQueue::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    const absl::Time now = clock_.Now();
    if (!due_.empty() && due_.begin()->first <= now) {
      std::function<void()> fn = std::move(due_.begin()->second);
      due_.erase(due_.begin());
      mu_.Unlock();
      fn();
      mu_.Lock();
      continue;
    }
    // Wake for the earliest deadline, a new (perhaps earlier) one, or the stop.
    const absl::Time wake = due_.empty() ? now + absl::Seconds(1) : due_.begin()->first;
    const size_t before = due_.size();
    auto changed = [this, before]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || due_.size() != before;
    };
    mu_.AwaitWithDeadline(absl::Condition(&changed), wake);
  }
}

}  // namespace moe::gateway
