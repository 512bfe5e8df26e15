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

void FutexWait(std::atomic<uint32_t>* addr, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void FutexWakeAll(std::atomic<uint32_t>* addr) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr,
          nullptr, 0);
}

}  // namespace

// Protocol. The caller publishes a job (its fields), then bumps `generation`, whose low bit says
// the kind of job. Static jobs (ParallelFor): every worker runs its own range (if any) and
// decrements `pending`; the caller runs range 0 and waits until `pending` is 0, so no worker can
// lag a static job behind. Dynamic jobs (ParallelForDynamic): chunks are claimed by CAS on
// `ticket` = (job number, next chunk, number of chunks) by the caller and by any worker that
// happens to run; the caller waits only until `done` counts every chunk, never for a worker that
// claimed nothing. A worker holding a claim keeps the job alive (the caller waits for its chunk),
// so the job's fields are stable while it runs one; a late worker finds the ticket exhausted, or
// claims a chunk of whatever job is current. Sleepers are woken only when some thread announced
// it sleeps (seq_cst flags on both sides, Dekker style). Park stores the current generation in
// `parked`: a worker that has seen that generation stops spinning and sleeps (a hint only: the
// next Publish moves generation past it, so the spin is back for the job after).
struct ThreadPool::Impl {
  int num_threads = 1;
  int spin_iterations = kDefaultSpinIterations;
  std::vector<std::thread> workers;

  alignas(64) std::atomic<uint32_t> generation{0};  // (count << 1) | dynamic
  std::atomic<uint32_t> sleeping_workers{0};
  std::atomic<uint32_t> parked{~0u};  // a generation whose idle workers sleep at once
  alignas(64) std::atomic<uint32_t> pending{0};
  std::atomic<uint32_t> caller_sleeping{0};
  alignas(64) std::atomic<uint64_t> ticket{0};
  alignas(64) std::atomic<uint32_t> done{0};
  // Atomic: a worker reads it on every generation, and a dynamic job's caller does not wait for
  // the workers that claimed nothing, so no join orders their last read before ~ThreadPool's write
  // (TSan's report). Relaxed suffices: Publish's seq_cst store of generation carries it.
  alignas(64) std::atomic<bool> stop{false};
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;  // range size (a multiple of grain)
  int num_chunks = 0;
  uint32_t dynamic_jobs = 0;

  // ticket: bits 44..63 job number (mod 2^20), 22..43 next chunk, 0..21 number of chunks.
  static constexpr int64_t kMaxDynamicChunks = (int64_t{1} << 22) - 1;
  static uint64_t Ticket(uint64_t job, uint64_t next, uint64_t count) {
    return ((job & 0xFFFFF) << 44) | (next << 22) | count;
  }

  void RunChunk(int index) const {
    if (index >= num_chunks) return;
    const int64_t begin = index * chunk;
    const int64_t end = std::min(n, begin + chunk);
    if (begin < end) (*fn)(begin, end);
  }

  // Claims and runs chunks of the current dynamic job until none is left.
  void RunDynamicChunks() {
    uint64_t t = ticket.load(std::memory_order_acquire);
    while (true) {
      const uint64_t next = (t >> 22) & kMaxDynamicChunks;
      const uint64_t count = t & kMaxDynamicChunks;
      if (next >= count) return;
      if (!ticket.compare_exchange_weak(t, t + (uint64_t{1} << 22), std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;
      }
      const int64_t begin = static_cast<int64_t>(next) * chunk;
      (*fn)(begin, std::min(n, begin + chunk));
      if (done.fetch_add(1, std::memory_order_seq_cst) + 1 == count &&
          caller_sleeping.load(std::memory_order_seq_cst) != 0) {
        FutexWakeAll(&done);
      }
      t = ticket.load(std::memory_order_acquire);
    }
  }

  void WorkerLoop(int index) {
    uint32_t seen = 0;
    while (true) {
      uint32_t g = generation.load(std::memory_order_acquire);
      for (int spin = 0; g == seen && spin < spin_iterations; ++spin) {
        if (parked.load(std::memory_order_relaxed) == seen) break;
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
      if (stop.load(std::memory_order_relaxed)) return;
      if (g & 1u) {
        RunDynamicChunks();
        continue;
      }
      RunChunk(index);
      if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping.load(std::memory_order_seq_cst) != 0) {
        FutexWakeAll(&pending);
      }
    }
  }

  void Publish(bool dynamic) {
    if (!dynamic) pending.store(static_cast<uint32_t>(workers.size()), std::memory_order_relaxed);
    const uint32_t g = generation.load(std::memory_order_relaxed);
    generation.store(((g >> 1) + 1) << 1 | (dynamic ? 1u : 0u), std::memory_order_seq_cst);
    if (sleeping_workers.load(std::memory_order_seq_cst) != 0) FutexWakeAll(&generation);
  }

  // Waits until *counter == target (spin, then futex; the last finisher wakes us).
  void WaitFor(std::atomic<uint32_t>* counter, uint32_t target) {
    uint32_t p = counter->load(std::memory_order_acquire);
    for (int spin = 0; p != target && spin < spin_iterations; ++spin) {
      MOE_CPU_RELAX();
      p = counter->load(std::memory_order_acquire);
    }
    if (p != target) {
      caller_sleeping.store(1, std::memory_order_seq_cst);
      while ((p = counter->load(std::memory_order_seq_cst)) != target) FutexWait(counter, p);
      caller_sleeping.store(0, std::memory_order_relaxed);
    }
  }
};

ThreadPool::ThreadPool(int num_threads, int spin_iterations) : impl_(new Impl) {
  MOE_CHECK(num_threads >= 1);
  MOE_CHECK(spin_iterations >= 0);
  impl_->num_threads = num_threads;
  impl_->spin_iterations = spin_iterations;
  impl_->workers.reserve(num_threads - 1);
  for (int i = 1; i < num_threads; ++i) {
    impl_->workers.emplace_back([this, i] { impl_->WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  if (!impl_->workers.empty()) {
    impl_->stop.store(true, std::memory_order_relaxed);
    impl_->Publish(/*dynamic=*/false);
    for (std::thread& t : impl_->workers) t.join();
  }
  delete impl_;
}

int ThreadPool::num_threads() const { return impl_->num_threads; }

void ThreadPool::Park() {
  impl_->parked.store(impl_->generation.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

int ThreadPool::sleeping_workers() const {
  return static_cast<int>(impl_->sleeping_workers.load(std::memory_order_relaxed));
}

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
  s.Publish(/*dynamic=*/false);
  s.RunChunk(0);
  s.WaitFor(&s.pending, 0);
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t grain,
                                    const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = (n + grain - 1) / grain;
  if (chunks > Impl::kMaxDynamicChunks) {
    grain = (n + Impl::kMaxDynamicChunks - 1) / Impl::kMaxDynamicChunks;
    chunks = (n + grain - 1) / grain;
  }
  if (chunks <= 1 || impl_->workers.empty()) {
    for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    return;
  }
  Impl& s = *impl_;
  // The previous job is complete (its caller waited for every chunk), so no thread reads these.
  s.fn = &fn;
  s.n = n;
  s.chunk = grain;
  s.done.store(0, std::memory_order_relaxed);
  s.ticket.store(Impl::Ticket(++s.dynamic_jobs, 0, static_cast<uint64_t>(chunks)),
                 std::memory_order_release);
  s.Publish(/*dynamic=*/true);
  s.RunDynamicChunks();
  s.WaitFor(&s.done, static_cast<uint32_t>(chunks));
}

}  // namespace moe::kernels
