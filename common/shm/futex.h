// Sleeping on a 32-bit word of shared memory: Linux futexes without FUTEX_PRIVATE_FLAG, so that
// the word may live in a mapping shared with another process. Only for sleeping: the rings
// (ring.h) synchronise through std::atomic, and every waiter re-checks its condition after a
// wake-up, so spurious wake-ups and timeouts are harmless.
//
// No abseil here or in ring.h / region.h: the ring unit test runs under clang -fsanitize=thread
// (CI's TSan stage, ctest -L tsan), and Debian's abseil is not built for TSan.
#pragma once

#include <atomic>
#include <cstdint>

namespace moe::shm {

// Sleeps while *word == expected, at most `timeout_ns` (>= 0); returns at once when the word
// already differs. The kernel compares atomically with the sleep, so a wake between the
// caller's last check and the sleep is not lost.
void FutexWait(const std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);

// Wakes every thread, of any process, sleeping on `word`.
void FutexWakeAll(const std::atomic<uint32_t>* word);

// CLOCK_MONOTONIC in nanoseconds (the same clock in every process of a host).
int64_t MonotonicNowNs();

// One pause instruction (a polite spin).
void CpuRelax();

}  // namespace moe::shm
