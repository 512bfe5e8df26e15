// TimerQueue on one thread of its own, by a Clock (the system clock in `gateway`).
//
// Thread-safe; the destructor drops pending callbacks and joins the thread.
#pragma once

#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "services/gateway/core/timer_queue.h"

namespace moe::gateway {

class ThreadTimerQueue final : public TimerQueue {
 public:
  explicit ThreadTimerQueue(common::Clock& clock);
  ~ThreadTimerQueue() override;

  void RunAt(absl::Time when, std::function<void()> fn) override;

 private:
  void Loop();

  common::Clock& clock_;
  absl::Mutex mu_;
  std::multimap<absl::Time, std::function<void()>> due_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace moe::gateway
