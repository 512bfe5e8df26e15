#include "common/kernels/thread_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MOE_CPU_RELAX() _mm_pause()
#else
#define MOE_CPU_RELAX() ((void)0)
#endif

#include "common/base/check.h"

namespace moe::kernels {
namespace {

// Spin this many pause iterations (~30-50 us) before sleeping on a futex: decode calls ParallelFor
// back to back, so a worker usually finds the next job while still spinning; an idle or
// oversubscribed machine gets its cores back soon.
constexpr int kSpinIterations = 2000;

void FutexWait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void FutexWakeAll(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

// Protocol: the caller publishes a job (fn, ranges), then bumps `generation`. Every worker runs
// its own range (if any) and decrements `pending`; the caller runs range 0 and waits until
// `pending` is 0, so no worker can lag a generation behind. Sleepers are woken only when some
// thread announced it sleeps (seq_cst flags on both sides, Dekker style).
struct ThreadPool::Impl {
  int num_threads = 1;
  std::vector<std::thread> workers;

  alignas(64) std::atomic<uint32_t> generation{0};
  std::atomic<uint32_t> sleeping_workers{0};
  alignas(64) std::atomic<uint32_t> pending{0};
  std::atomic<uint32_t> caller_sleeping{0};
  alignas(64) bool stop = false;
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;  // range size (a multiple of grain)
  int num_chunks = 0;

  void RunChunk(int index) const {
    if (index >= num_chunks) return;
    const int64_t begin = index * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(begin, end);
  }

  void WorkerLoop(int index) {
    uint32_t seen = 0;
    while (true) {
      uint32_t g = generation.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
        MOE_CPU_RELAX();
        g = generation.load(std::memory_order_acquire);
      }
      if (g == seen) {
        sleeping_workers.fetch_add(1, std::memory_order_seq_cst);
        while ((g = generation.load(std::memory_order_seq_cst)) == seen)
          FutexWait(&generation, seen);
        sleeping_workers.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = g;
      if (stop) return;
      RunChunk(index);
      if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping.load(std::memory_order_seq_cst) != 0) {
        FutexWakeAll(&pending);
      }
    }
  }

  void Publish() {
    pending.store(static_cast<uint32_t>(workers.size()), std::memory_order_relaxed);
    generation.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_workers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&generation);
  }

  void WaitWorkers() {
    uint32_t p = pending.load(std::memory_order_acquire);
    for (int spin = 0; p != 0 && spin < kSpinIterations; ++spin) {
      MOE_CPU_RELAX();
      p = pending.load(std::memory_order_acquire);
    }
    if (p != 0) {
      caller_sleeping.store(1, std::memory_order_seq_cst);
      while ((p = pending.load(std::memory_order_seq_cst)) != 0) FutexWait(&pending, p);
      caller_sleeping.store(0, std::memory_order_relaxed);
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl) {
  MOE_CHECK(num_threads >= 1);
  impl_->num_threads = num_threads;
  impl_->workers.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  if (!impl_->workers.empty()) {
    impl_->stop = true;
    impl_->Publish();
    for (std::thread& t : impl_->workers) t.join();
  }
  delete impl_;
}

int ThreadPool::num_threads() const { return impl_->num_threads; }

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t num_chunks = std::min<int64_t>(units, impl_->num_threads);
  if (num_chunks <= 1) {
    fn(0, n);
    return;
  }
  Impl& s = *impl_;
  s.fn = &fn;
  s.n = n;
  s.chunk = (units + num_chunks - 1) / num_chunks * grain;
  s.num_chunks = static_cast<int>(num_chunks);
  s.Publish();
  s.RunChunk(0);
  s.WaitWorkers();
}

}  // namespace moe::kernels
