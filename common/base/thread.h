// Naming and de-prioritising the calling thread: background threads (write-behind to the
// kv-store and to its disk tier) show up by name in `top -H`, `perf` and /proc, and yield the
// cores to the engine's threads on a shared host.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace moe::common {

// Names the calling thread (Linux keeps the first 15 bytes). Best effort: never fails.
void SetCurrentThreadName(std::string_view name);

// The CPU niceness background threads run at: the lowest priority short of SCHED_IDLE, so a
// background thread still makes progress on a busy host (about 1.5 % of a core against one
// thread at the default 0) but never takes a core from a request's work while it waits.
inline constexpr int kBackgroundNice = 19;

// Sets the calling thread's niceness (Linux: per thread; raising it needs no privilege).
// Errors: INTERNAL with errno's text.
absl::Status SetCurrentThreadNice(int nice);

// Names the calling thread and moves it to kBackgroundNice, for write-behind threads; if the
// priority cannot be changed it logs one warning and the thread runs on at its priority.
void BecomeBackgroundThread(std::string_view name);

}  // namespace moe::common
