// A fixed pool of worker threads for data-parallel kernels. The calling thread takes part.
#pragma once

#include <cstdint>
#include <functional>

namespace moe::kernels {

// Thread-safe for one caller at a time: ParallelFor calls must not overlap on the same pool
// (each engine owns its pool). Destruction joins the workers.
class ThreadPool {
 public:
  // How many pause iterations (~30-50 us) a worker spins for the next job before it sleeps on a
  // futex: decode calls ParallelFor back to back, so a worker usually finds the next job while
  // still spinning.
  static constexpr int kDefaultSpinIterations = 2000;

  // num_threads >= 1 counts the caller: ThreadPool(2) starts one worker thread.
  // spin_iterations >= 0: kDefaultSpinIterations unless a test needs another bound.
  explicit ThreadPool(int num_threads, int spin_iterations = kDefaultSpinIterations);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const;

  // Runs fn(begin, end) over [0, n) split into at most num_threads contiguous ranges (each a
  // multiple of `grain` except the last), and returns when all are done.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

  // Runs fn(begin, end) over [0, n) cut into chunks of `grain` (the last may be shorter), which
  // the caller and whichever workers are running take in turn; returns when all are done. The
  // caller never waits for a worker that has not started (asleep, or descheduled on a busy
  // machine), only for chunks already running, so work whose split does not matter finishes as
  // soon as the threads that do run get through it. Which thread runs a chunk is unspecified.
  void ParallelForDynamic(int64_t n, int64_t grain,
                          const std::function<void(int64_t, int64_t)>& fn);

  // Sends the workers that spin for the next job to sleep now (futex) instead of at the end of
  // their spin; the next ParallelFor wakes them as usual, and they spin again after it. For a
  // caller that is about to block on something other than this pool (the engine before it waits
  // for remote experts): where every core is taken, a spinning worker holds the core that the
  // awaited peer needs. One atomic store, no system call; same caller rule as ParallelFor.
  void Park();

  // Workers asleep on the futex right now (a snapshot, for tests).
  int sleeping_workers() const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace moe::kernels
