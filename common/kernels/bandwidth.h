// Streaming read bandwidth of this machine, the yardstick of memory-bound decode
// (decode_bandwidth_efficiency = weight bytes read per second / this).
#pragma once

#include <cstdint>

#include "common/kernels/thread_pool.h"

namespace moe::kernels {

// Bytes per second of all the pool's threads summing disjoint parts of one buffer of `bytes`
// (far larger than the caches), best of a few passes after a warm-up pass. pool may be null
// (one thread). Takes about (passes * bytes / bandwidth) seconds: ~0.2 s for 1 GiB here.
double MeasureStreamReadBandwidth(ThreadPool* pool, int64_t bytes = int64_t{1} << 30);

}  // namespace moe::kernels
