#include "common/kernels/bandwidth.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include "common/base/check.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace moe::kernels {
namespace {

#if defined(__x86_64__)
// Sums 64-byte lines with 4 independent chains (AVX-512 when present): fast enough that memory,
// not the adds, is the limit.
__attribute__((target("avx512f"))) double SumAvx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  alignas(64) float t[16];
  _mm512_store_ps(t, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  double s = 0;
  for (float v : t) s += v;
  return s;
}
__attribute__((target("avx2"))) double SumAvx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  alignas(32) float t[8];
  _mm256_store_ps(t, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  double s = 0;
  for (float v : t) s += v;
  return s;
}
#endif

double SumPortable(const float* p, int64_t n) {
  float a[16] = {};
  for (int64_t i = 0; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) a[l] += p[i + l];
  }
  double s = 0;
  for (float v : a) s += v;
  return s;
}

double Sum(const float* p, int64_t n) {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return SumAvx512(p, n);
  if (__builtin_cpu_supports("avx2")) return SumAvx2(p, n);
#endif
  return SumPortable(p, n);
}

}  // namespace

namespace {

double MeasureOne(ThreadPool* pool, int64_t bytes) {
  constexpr int64_t kChunkFloats = (256 << 10) / 4;  // 256 KiB: 64 pages per chunk
  bytes = std::max<int64_t>(bytes / (kChunkFloats * 4) * (kChunkFloats * 4), kChunkFloats * 4);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MOE_CHECK(mem != MAP_FAILED);
  float* buf = static_cast<float*>(mem);
  const int64_t chunks = bytes / (kChunkFloats * 4);
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  // One sink per chunk: no two threads write the same one, whoever runs a chunk.
  std::vector<double> sinks(static_cast<size_t>(chunks), 0.0);
  auto run = [&](const std::function<void(int64_t, int64_t)>& body) {
    if (pool == nullptr || threads <= 1) {
      body(0, chunks);
    } else {
      pool->ParallelForDynamic(chunks, 1, body);
    }
  };
  // First touch in parallel (pages land near the threads that read them), with non-zero data.
  run([&](int64_t b, int64_t e) {
    std::fill(buf + b * kChunkFloats, buf + e * kChunkFloats, 1.0f);
  });
  auto pass = [&] {
    run([&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) sinks[c] += Sum(buf + c * kChunkFloats, kChunkFloats);
    });
  };
  pass();  // warm-up
  double best = 0.0;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    pass();
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    best = std::max(best, static_cast<double>(bytes) / s);
  }
  munmap(mem, bytes);
  volatile double sink = 0;
  for (double v : sinks) sink = sink + v;
  (void)sink;
  return best;
}

}  // namespace

std::vector<int64_t> DefaultReadProbeSizes() {
  int64_t l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = int64_t{32} << 20;
  return {std::max<int64_t>(2 * l3, int64_t{512} << 20),
          std::max<int64_t>(4 * l3, int64_t{1} << 30)};
}

std::vector<ReadBandwidth> MeasureReadBandwidth(ThreadPool* pool,
                                                const std::vector<int64_t>& sizes) {
  std::vector<ReadBandwidth> out;
  for (int64_t bytes : sizes) out.push_back({bytes, MeasureOne(pool, bytes)});
  return out;
}

double MeasureStreamReadBandwidth(ThreadPool* pool, int64_t bytes) {
  double best = 0.0;
  for (const ReadBandwidth& r :
       MeasureReadBandwidth(pool, bytes == 0 ? DefaultReadProbeSizes() : std::vector{bytes})) {
    best = std::max(best, r.bytes_per_s);
  }
  return best;
}

}  // namespace moe::kernels
