#include "common/kernels/bandwidth.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
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

double MeasureStreamReadBandwidth(ThreadPool* pool, int64_t bytes) {
  constexpr int64_t kLine = 4096;  // each thread's part is a multiple of a page
  bytes = std::max<int64_t>(bytes / kLine * kLine, kLine);
  void* mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  MOE_CHECK(mem != MAP_FAILED);
  float* buf = static_cast<float*>(mem);
  const int64_t n = bytes / 4;
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  std::vector<double> sinks(threads, 0.0);
  auto pass = [&] {
    auto body = [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) {
        const int64_t per = (n / threads) / 1024 * 1024;
        const int64_t begin = t * per;
        const int64_t end = t == threads - 1 ? n : begin + per;
        sinks[t] += Sum(buf + begin, end - begin);
      }
    };
    if (pool == nullptr) {
      body(0, 1);
    } else {
      pool->ParallelFor(threads, 1, body);
    }
  };
  // First touch in parallel (pages land near the threads that read them), with non-zero data.
  auto touch = [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t per = (n / threads) / 1024 * 1024;
      const int64_t begin = t * per;
      const int64_t end = t == threads - 1 ? n : begin + per;
      std::fill(buf + begin, buf + end, 1.0f);
    }
  };
  if (pool == nullptr) {
    touch(0, 1);
  } else {
    pool->ParallelFor(threads, 1, touch);
  }
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

}  // namespace moe::kernels
