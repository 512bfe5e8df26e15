// Injected time (STYLE.md rule 8): core code asks a Clock&, tests use FakeClock.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace moe::common {

// Thread-safe: implementations may be called from any thread.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock now.
  virtual absl::Time Now() const = 0;
  // Blocks the caller for `d` (FakeClock advances instead of blocking).
  virtual void SleepFor(absl::Duration d) = 0;
};

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  // The process-wide real clock.
  static SystemClock& Get() {
    static SystemClock clock;
    return clock;
  }
};

}  // namespace moe::common
