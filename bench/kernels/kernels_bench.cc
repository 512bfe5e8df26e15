// Kernel micro-benchmark: MatMul GFLOP/s at m = 1, 8, 32, 512 on the bench preset's shapes, the
// m = 1 weight-streaming bandwidth against the machine's streaming read bandwidth (measured in
// the same run), attention, and the thread pool's ParallelFor overhead.
//
//   moe_kernels_bench [--threads N] [--isa avx512_bf16|avx512|avx2|portable] [--quick]
//                     [--activations f32|bf16|both]   (bf16: kernels.h BF16-ACTIVATION MODE;
//                     both: each bf16-weight MatMul in both modes, side by side)
//                     [--q8 [--q8-rounds N] [--q8-mb MB]]   (only q8_0 against bf16 weights at
//                     m = 1, 32, 512 on the expert and lm_head shapes, alternating, best of N
//                     rounds; MB: the bf16 weight set's size, q8_0's is half)
//                     [--warm-prefix N]   (the warm attention step's cached prefix, default 2048)
//   moe_kernels_bench --shapes 0 --no-probe   (attention only)
#include <immintrin.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/kernels/bandwidth.h"
#include "common/kernels/dispatch.h"
#include "common/kernels/kernels.h"
#include "common/kernels/thread_pool.h"
#include "common/tensor/dtype.h"

namespace moe::kernels {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct Shape {
  const char* name;
  int64_t k, n;
};

// Enough distinct copies of W that m = 1 streams them from memory, not from the 32 MB L3.
struct WeightSet {
  std::vector<std::vector<uint16_t>> copies16;
  std::vector<std::vector<float>> copies32;
  DType dtype;
  int64_t k, n;
  std::vector<std::vector<uint8_t>> copies8;  // q8_0
  WeightView View(size_t i) const {
    const void* p = dtype == DType::kF32    ? static_cast<const void*>(copies32[i].data())
                    : dtype == DType::kQ8_0 ? static_cast<const void*>(copies8[i].data())
                                            : static_cast<const void*>(copies16[i].data());
    return WeightView{p, dtype, n, k};
  }
  size_t count() const {
    return dtype == DType::kF32    ? copies32.size()
           : dtype == DType::kQ8_0 ? copies8.size()
                                   : copies16.size();
  }
  int64_t bytes() const { return n * common::RowBytes(dtype, k); }
};

WeightSet MakeSet(DType dtype, int64_t k, int64_t n, int64_t min_total_bytes) {
  WeightSet s{{}, {}, dtype, k, n, {}};
  const int64_t copies = std::max<int64_t>(1, (min_total_bytes + s.bytes() - 1) / s.bytes());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-0.05f, 0.05f);
  for (int64_t c = 0; c < copies; ++c) {
    if (dtype == DType::kQ8_0) {  // the bf16 weights of the other sets, quantized on load
      std::vector<uint16_t> src(k * n);
      for (uint16_t& h : src) h = common::F32ToBf16(dist(rng));
      s.copies8.emplace_back(s.bytes());
      if (!QuantizeRowsQ8_0(src.data(), DType::kBF16, n, k, s.copies8.back().data(), nullptr)
               .ok()) {
        std::abort();
      }
    } else if (dtype == DType::kF32) {
      s.copies32.emplace_back(k * n);
      for (float& f : s.copies32.back()) f = dist(rng);
    } else {
      s.copies16.emplace_back(k * n);
      for (uint16_t& h : s.copies16.back()) {
        h = dtype == DType::kBF16 ? common::F32ToBf16(dist(rng)) : common::F32ToF16(dist(rng));
      }
    }
  }
  return s;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// CPU seconds of the calling thread per call in the last TimeMatMul (meaningful with 1 thread on
// a busy machine: the kernel's own speed, whatever share of the core it got).
double g_cpu_per_call = 0;

// Runs MatMul over rotating weight copies for about `budget_s`; returns seconds per call.
double TimeMatMul(const WeightSet& w, int64_t m, ThreadPool* pool, double budget_s,
                  Activations act = Activations::kF32) {
  std::vector<float> x(m * w.k, 0.01f), y(m * w.n);
  size_t idx = 0;
  for (size_t i = 0; i < w.count(); ++i) {
    MatMul(x.data(), m, w.View(i), y.data(), pool, nullptr, act);  // warm
  }
  int64_t calls = 0;
  const auto start = Clock::now();
  const double cpu0 = ThreadCpuSeconds();
  double elapsed = 0;
  while (elapsed < budget_s || calls < 3) {
    MatMul(x.data(), m, w.View(idx), y.data(), pool, nullptr, act);
    idx = (idx + 1) % w.count();
    ++calls;
    elapsed = Seconds(start, Clock::now());
  }
  g_cpu_per_call = (ThreadCpuSeconds() - cpu0) / calls;
  return elapsed / calls;
}

// Streaming read of one thread measured in that thread's CPU time: on a shared (oversubscribed)
// machine this is the per-core rate the m = 1 "caller cpu" figures compare with.
__attribute__((target("avx512f"))) double CpuTimeReadBandwidth(int64_t bytes) {
  const int64_t n = bytes / 4;
  std::vector<float> buf(n, 1.0f);
  double best = 0;
  float sink = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const double c0 = ThreadCpuSeconds();
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i + 64 <= n; i += 64) {
      a0 = _mm512_add_ps(a0, _mm512_loadu_ps(&buf[i]));
      a1 = _mm512_add_ps(a1, _mm512_loadu_ps(&buf[i + 16]));
      a2 = _mm512_add_ps(a2, _mm512_loadu_ps(&buf[i + 32]));
      a3 = _mm512_add_ps(a3, _mm512_loadu_ps(&buf[i + 48]));
    }
    alignas(64) float t[16];
    _mm512_store_ps(t, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    sink += t[0];
    const double cpu = ThreadCpuSeconds() - c0;
    if (pass > 0) best = std::max(best, bytes / cpu);
  }
  volatile float v = sink;
  (void)v;
  return best;
}

// q8_0 against bf16 weights (kernels.h INT8 WEIGHTS), measured alternating in one run (rounds of
// bf16 then q8_0, best of the rounds each) so a busy machine's noise hits both alike. Weight
// GB/s counts each format's own bytes (q8_0: 1.0625 B per weight, bf16: 2).
void RunQ8Comparison(ThreadPool* pool, double budget, int rounds, int64_t set_bytes,
                     int64_t max_m) {
  const Shape shapes[] = {{"expert gate/up (k=1024,n=2816)", 1024, 2816},
                          {"expert down (k=2816,n=1024)", 2816, 1024},
                          {"lm_head (k=1024,n=32000)", 1024, 32000}};
  for (const Shape& s : shapes) {
    const WeightSet bf = MakeSet(DType::kBF16, s.k, s.n, set_bytes);
    const WeightSet q8 = MakeSet(DType::kQ8_0, s.k, s.n, set_bytes / 2);
    for (const int64_t m : {int64_t{1}, int64_t{32}, int64_t{512}}) {
      if (m > max_m || (m == 512 && s.n == 32000)) continue;
      double best[2] = {1e30, 1e30}, best_cpu[2] = {1e30, 1e30};
      for (int r = 0; r < rounds; ++r) {
        for (int which = 0; which < 2; ++which) {
          const double t = TimeMatMul(which == 0 ? bf : q8, m, pool, budget);
          best[which] = std::min(best[which], t);
          best_cpu[which] = std::min(best_cpu[which], g_cpu_per_call);
        }
      }
      const double flop = 2.0 * m * s.k * s.n;
      for (int which = 0; which < 2; ++which) {
        const WeightSet& w = which == 0 ? bf : q8;
        std::printf(
            "q8cmp %-5s %-31s m=%-4lld %8.3f ms %7.1f GFLOP/s %7.2f GB/s (caller cpu: %8.3f ms "
            "%7.1f GFLOP/s %7.2f GB/s)\n",
            which == 0 ? "bf16" : "q8_0", s.name, static_cast<long long>(m), best[which] * 1e3,
            flop / best[which] / 1e9, w.bytes() / best[which] / 1e9, best_cpu[which] * 1e3,
            flop / best_cpu[which] / 1e9, w.bytes() / best_cpu[which] / 1e9);
      }
      std::printf("q8cmp ratio %-31s m=%-4lld speed q8_0/bf16 x%.2f (caller cpu x%.2f)\n", s.name,
                  static_cast<long long>(m), best[0] / best[1], best_cpu[0] / best_cpu[1]);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace moe::kernels

int main(int argc, char** argv) {
  using namespace moe::kernels;
  int threads = 2;
  bool quick = false;
  bool probe_enabled = true;
  int64_t max_m = 512;
  int64_t warm_prefix = 2048;  // the warm-TTFT attention step's cached prefix
  int num_shapes = 4;
  const char* only_dtype = nullptr;
  const char* isa = std::getenv("MOE_KERNELS_ISA");  // --isa overrides it
  if (isa == nullptr) isa = "auto";
  std::vector<Activations> acts = {Activations::kF32};
  bool q8 = false;
  int q8_rounds = 3;
  int64_t q8_mb = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--activations") == 0 && i + 1 < argc) {
      const std::string a = argv[++i];
      acts = a == "bf16"   ? std::vector<Activations>{Activations::kBf16}
             : a == "both" ? std::vector<Activations>{Activations::kF32, Activations::kBf16}
                           : std::vector<Activations>{Activations::kF32};
    }
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) threads = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--no-probe") == 0) probe_enabled = false;
    if (std::strcmp(argv[i], "--max-m") == 0 && i + 1 < argc) max_m = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--shapes") == 0 && i + 1 < argc) num_shapes = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) only_dtype = argv[++i];
    if (std::strcmp(argv[i], "--isa") == 0 && i + 1 < argc) isa = argv[++i];
    if (std::strcmp(argv[i], "--q8") == 0) q8 = true;
    if (std::strcmp(argv[i], "--q8-rounds") == 0 && i + 1 < argc) q8_rounds = std::atoi(argv[++i]);
    if (std::strcmp(argv[i], "--q8-mb") == 0 && i + 1 < argc) q8_mb = std::atoll(argv[++i]);
    if (std::strcmp(argv[i], "--warm-prefix") == 0 && i + 1 < argc) {
      warm_prefix = std::atoll(argv[++i]);
    }
  }
  if (absl::Status s = SelectIsa(isa); !s.ok()) {
    std::fprintf(stderr, "--isa / MOE_KERNELS_ISA: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  ThreadPool pool(threads);
  const double budget = quick ? 0.15 : 0.5;
  std::printf("isa=%s threads=%d\n", ActiveIsa(), threads);

  const double probe = probe_enabled ? MeasureStreamReadBandwidth(&pool, int64_t{1} << 30) : 1.0;
  std::printf("stream_read_bandwidth: %.2f GB/s\n", probe / 1e9);
  if (probe_enabled && threads == 1) {
    std::printf("stream_read_bandwidth (1 thread, per cpu-second): %.2f GB/s\n",
                CpuTimeReadBandwidth(int64_t{512} << 20) / 1e9);
  }

  if (q8) {
    RunQ8Comparison(&pool, budget, q8_rounds, q8_mb << 20, max_m);
    return 0;
  }

  // ParallelFor overhead (empty bodies, back to back).
  {
    auto fn = [](int64_t, int64_t) {};
    for (int i = 0; i < 1000; ++i) pool.ParallelFor(threads, 1, fn);
    const int calls = 20000;
    const auto start = Clock::now();
    for (int i = 0; i < calls; ++i) pool.ParallelFor(threads, 1, fn);
    std::printf("parallel_for_overhead: %.2f us\n", Seconds(start, Clock::now()) / calls * 1e6);
  }

  const Shape shapes[] = {{"gate/up (k=1024,n=2816)", 1024, 2816},
                          {"down (k=2816,n=1024)", 2816, 1024},
                          {"q/o (k=1024,n=1024)", 1024, 1024},
                          {"lm_head (k=1024,n=32000)", 1024, 32000}};
  const DType dtypes[] = {DType::kBF16, DType::kF32, DType::kF16};
  const int64_t ms[] = {1, 8, 32, 512};
  for (DType dt : dtypes) {
    if (only_dtype != nullptr && moe::common::DTypeName(dt) != only_dtype) continue;
    for (int si = 0; si < num_shapes && si < 4; ++si) {
      const Shape& s = shapes[si];
      if (quick && dt != DType::kBF16 && s.n == 32000) continue;
      const WeightSet w = MakeSet(dt, s.k, s.n, int64_t{96} << 20);
      for (Activations act : acts) {
        if (act == Activations::kBf16 && dt != DType::kBF16) continue;  // bf16 weights only
        double t1 = 0;
        for (int64_t m : ms) {
          if (m > max_m || (m == 512 && s.n == 32000))
            continue;  // prefill computes logits for the last row only
          const double t = TimeMatMul(w, m, &pool, budget, act);
          if (m == 1) t1 = t;
          const double gflops = 2.0 * m * s.k * s.n / t / 1e9;
          const double cpu_gflops = 2.0 * m * s.k * s.n / g_cpu_per_call / 1e9;
          std::printf(
              "%-5s act=%-4s %-26s m=%-4lld %8.3f ms %7.1f GFLOP/s (caller cpu: %6.1f GFLOP/s)",
              std::string(moe::common::DTypeName(dt)).c_str(), ActivationsName(act), s.name,
              static_cast<long long>(m), t * 1e3, gflops, cpu_gflops);
          if (m == 1) {
            const double bw = w.bytes() / t;
            std::printf("  weights %.2f GB/s = %.2f of probe (caller cpu: %.2f GB/s)", bw / 1e9,
                        bw / probe, w.bytes() / g_cpu_per_call / 1e9);
          } else {
            std::printf("  tokens/s x%.1f of m=1", m * t1 / t);
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
    }
  }

  // Attention: decode over a 512-token context, and a 512-token causal prefill.
  {
    const int64_t heads = 16, kv_heads = 4, hd = 64, bs = 16, ctx = 512;
    PagedKvLayout layout{ctx / bs, bs, kv_heads, hd};
    std::vector<float> kc(layout.num_blocks * bs * kv_heads * hd, 0.01f), vc = kc;
    std::vector<int32_t> table(layout.num_blocks);
    for (int64_t b = 0; b < layout.num_blocks; ++b) table[b] = static_cast<int32_t>(b);
    for (int64_t m : {int64_t{1}, int64_t{512}}) {
      std::vector<AttentionToken> toks(m);
      for (int64_t i = 0; i < m; ++i) {
        toks[i] = {static_cast<int32_t>(m == 1 ? ctx - 1 : i), table.data()};
      }
      std::vector<float> q(m * heads * hd, 0.02f), out(q.size());
      int calls = 0;
      const auto start = Clock::now();
      const double cpu0 = ThreadCpuSeconds();
      while (Seconds(start, Clock::now()) < budget || calls < 3) {
        PagedAttention(q.data(), m, heads, toks.data(), layout, kc.data(), vc.data(), 0.125f,
                       out.data(), &pool);
        ++calls;
      }
      std::printf(
          "attention %s: %.3f ms (caller cpu %.3f ms)\n", m == 1 ? "decode ctx=512" : "prefill 512",
          Seconds(start, Clock::now()) / calls * 1e3, (ThreadCpuSeconds() - cpu0) / calls * 1e3);
    }
  }
  // The warm-TTFT step (issue 18): a 32-token prefill at positions 2048..2079 over a cached
  // 2048-token prefix, on the bench preset's heads (16 / 4 KV) and the small preset's (4 / 2).
  for (const auto& [heads, kv_heads] : {std::pair<int64_t, int64_t>{16, 4}, {4, 2}}) {
    const int64_t hd = 64, bs = 16, prefix = warm_prefix, m = 32;
    PagedKvLayout layout{(prefix + m + bs - 1) / bs, bs, kv_heads, hd};
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> kc(layout.num_blocks * bs * kv_heads * hd), vc(kc.size());
    for (float& f : kc) f = dist(rng);
    for (float& f : vc) f = dist(rng);
    std::vector<int32_t> table(layout.num_blocks);
    for (int64_t b = 0; b < layout.num_blocks; ++b) table[b] = static_cast<int32_t>(b);
    std::vector<AttentionToken> toks(m);
    for (int64_t i = 0; i < m; ++i) toks[i] = {static_cast<int32_t>(prefix + i), table.data()};
    std::vector<float> q(m * heads * hd), out(q.size());
    for (float& f : q) f = dist(rng);
    PagedAttention(q.data(), m, heads, toks.data(), layout, kc.data(), vc.data(), 0.125f,
                   out.data(), &pool);
    int calls = 0;
    double best = 1e30;
    const auto start = Clock::now();
    const double cpu0 = ThreadCpuSeconds();
    while (Seconds(start, Clock::now()) < budget || calls < 5) {
      const auto s0 = Clock::now();
      PagedAttention(q.data(), m, heads, toks.data(), layout, kc.data(), vc.data(), 0.125f,
                     out.data(), &pool);
      best = std::min(best, Seconds(s0, Clock::now()));
      ++calls;
    }
    const double flops = 4.0 * heads * hd * m * (prefix + (m + 1) / 2.0);
    std::printf(
        "attention warm 32 @ %lld (heads %lld/%lld): %.3f ms mean, %.3f ms best, %.1f GFLOP/s "
        "(caller cpu %.3f ms)\n",
        static_cast<long long>(prefix), static_cast<long long>(heads),
        static_cast<long long>(kv_heads), Seconds(start, Clock::now()) / calls * 1e3, best * 1e3,
        flops / best / 1e9, (ThreadCpuSeconds() - cpu0) / calls * 1e3);
  }
  return 0;
}
