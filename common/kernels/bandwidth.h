// Streaming read bandwidth of this machine, the yardstick of memory-bound decode
// (decode_bandwidth_efficiency = weight bytes read per second / this).
#pragma once

#include <cstdint>
#include <vector>

#include "common/kernels/thread_pool.h"

namespace moe::kernels {

// One buffer size's figure.
struct ReadBandwidth {
  int64_t bytes = 0;         // buffer size
  double bytes_per_s = 0.0;  // best of the timed passes
};

// The buffer sizes the default probe reads: 2x and 4x the last-level cache (sysconf; 32 MiB when
// unknown), at least 512 MiB and 1 GiB, so the figure is memory's, not a cache's (these VMs
// report a 480 MiB L3: a 256 MiB buffer would be read from the cache).
std::vector<int64_t> DefaultReadProbeSizes();

// The best sustained read of this machine with the pool's threads (the engine's, so the same
// cores): for each size, one buffer of that many bytes (first touched in parallel, non-zero data)
// summed by all threads in 256 KiB chunks taken dynamically (a thread descheduled on a busy
// machine leaves its chunks to the others, as the engine's matmuls do, instead of holding the
// pass to its pace as a static split would); a warm-up pass, then the best of 3 timed passes.
// pool may be null (one thread). About 4 * bytes / bandwidth seconds per size.
std::vector<ReadBandwidth> MeasureReadBandwidth(ThreadPool* pool,
                                                const std::vector<int64_t>& sizes);

// The largest figure of MeasureReadBandwidth over `bytes` alone, or over DefaultReadProbeSizes()
// when bytes == 0.
double MeasureStreamReadBandwidth(ThreadPool* pool, int64_t bytes = 0);

}  // namespace moe::kernels
