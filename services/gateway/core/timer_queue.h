// Deferred work for the gateway core (the realtime session paces audio to real time): the
// injected form of "run this later" (STYLE.md rule 8). Production: thread_timer_queue.h (one
// thread for every session); tests: testing/manual_timer_queue.h, run when the test says.
//
// Thread-safety: RunAt may be called from any thread; callbacks run on the queue's thread, one
// at a time, and must not block.
#pragma once

#include <functional>

#include "absl/time/time.h"

namespace moe::gateway {

class TimerQueue {
 public:
  virtual ~TimerQueue() = default;
  // Runs `fn` once at or after `when` (by the queue's clock). Callbacks still pending when the
  // queue is destroyed are dropped: `fn` must hold what it needs (a weak_ptr to its session).
  virtual void RunAt(absl::Time when, std::function<void()> fn) = 0;
};

}  // namespace moe::gateway
