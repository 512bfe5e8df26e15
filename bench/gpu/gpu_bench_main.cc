// moe_gpu_bench: the GPU figures of issue 19 as one DESIGN.md §6 JSON line, run by
// tests/gpu/device_check.sh on a GPU machine (a standalone binary: it travels without gRPC).
//   expert_gemm_over_cublas     the grouped bf16 expert FFN's TFLOP/s over cuBLAS dense GEMMs of
//                               the same FLOPs (goal >= 0.8)
//   attention_decode_bandwidth  bytes of K/V read per second by a decode batch, over the
//                               measured device-to-device copy bandwidth
//   decode_tok_s_b1 / _b8       the engine with its experts on the GPU (CudaExpertExecutor),
//                               over the same engine on this machine's CPU, same run
// Usage: moe_gpu_bench [--preset bench|small|tiny] [--threads N] [--quick] [--out FILE]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/bench_report.h"
#include "bench/common/suite.h"
#include "bench/engine/engine_bench.h"
#include "common/engine/cuda/cuda_expert_executor.h"
#include "common/engine/engine.h"
#include "common/kernels/cuda/cuda_kernels.h"
#include "common/model/checkpoint.h"
#include "common/tensor/dtype.h"

namespace moe::bench {
namespace {

namespace cu = kernels::cuda;

#define BENCH_CHECK(expr)                                        \
  do {                                                           \
    const auto moe_bench_s_ = (expr);                            \
    if (!moe_bench_s_.ok()) {                                    \
      std::fprintf(stderr, "moe_gpu_bench: %s: %s\n", #expr,     \
                   std::string(moe_bench_s_.message()).c_str()); \
      std::exit(1);                                              \
    }                                                            \
  } while (0)
#define CUDA_CHECK(expr)                                                                        \
  do {                                                                                          \
    const cudaError_t moe_bench_e_ = (expr);                                                    \
    if (moe_bench_e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "moe_gpu_bench: %s: %s\n", #expr, cudaGetErrorString(moe_bench_e_)); \
      std::exit(1);                                                                             \
    }                                                                                           \
  } while (0)

cu::DeviceBuffer Alloc(size_t bytes) {
  auto b = cu::DeviceBuffer::Allocate(bytes);
  BENCH_CHECK(b.status());
  return std::move(*b);
}

template <typename T>
cu::DeviceBuffer Upload(const std::vector<T>& v) {
  cu::DeviceBuffer b = Alloc(v.size() * sizeof(T));
  BENCH_CHECK(cu::CopyToDevice(b.data(), v.data(), v.size() * sizeof(T)));
  return b;
}

// Seconds per call of `fn` on the default stream (events; best of `reps` after a warm-up).
template <typename Fn>
double TimeDevice(Fn fn, int reps) {
  fn();
  CUDA_CHECK(cudaDeviceSynchronize());
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    CUDA_CHECK(cudaEventRecord(a));
    fn();
    CUDA_CHECK(cudaEventRecord(b));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms / 1e3);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  return best;
}

std::vector<uint16_t> RandomBf16(std::mt19937& rng, size_t n, float scale) {
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<uint16_t> v(n);
  for (uint16_t& x : v) x = common::F32ToBf16(d(rng));
  return v;
}

void ExpertGemm(BenchReport& report, bool quick) {
  const int64_t experts = 8, rows_per_expert = quick ? 64 : 256, hidden = 1024, inter = 2816;
  const int64_t m = experts * rows_per_expert;
  std::mt19937 rng(1);
  const auto gate = Upload(RandomBf16(rng, experts * inter * hidden, 0.03f));
  const auto up = Upload(RandomBf16(rng, experts * inter * hidden, 0.03f));
  const auto down = Upload(RandomBf16(rng, experts * hidden * inter, 0.02f));
  std::vector<float> x(m * hidden);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.001f * static_cast<float>(i));
  const auto d_x = Upload(x);
  std::vector<int32_t> offsets(experts + 1), slots(experts);
  for (int64_t e = 0; e <= experts; ++e) offsets[e] = static_cast<int32_t>(e * rows_per_expert);
  for (int64_t e = 0; e < experts; ++e) slots[e] = static_cast<int32_t>(experts - 1 - e);
  const auto d_off = Upload(offsets), d_slot = Upload(slots);
  const auto act = Alloc(m * inter * 4), y = Alloc(m * hidden * 4);
  const cu::GroupedFfnParams p{.hidden = hidden,
                               .inter = inter,
                               .num_groups = static_cast<int32_t>(experts),
                               .total_rows = m,
                               .offsets = d_off.as<int32_t>(),
                               .group_slot = d_slot.as<int32_t>(),
                               .gate = gate.as<uint16_t>(),
                               .up = up.as<uint16_t>(),
                               .down = down.as<uint16_t>()};
  const double flops = 2.0 * m * hidden * inter * 3;
  const int reps = quick ? 3 : 20;
  const double grouped = TimeDevice(
      [&] {
        BENCH_CHECK(cu::LaunchGroupedExpertFfn(p, d_x.as<float>(), act.as<float>(), y.as<float>(),
                                               nullptr));
      },
      reps);
  // cuBLAS: the same FLOPs as three dense bf16 GEMMs with f32 accumulation (gate and up as one
  // [2*inter, hidden] GEMM, down as [hidden, inter]) over all m rows.
  cublasHandle_t h;
  if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
    std::fprintf(stderr, "moe_gpu_bench: cublasCreate failed\n");
    std::exit(1);
  }
  const auto a1 = Upload(RandomBf16(rng, m * hidden, 1.0f));
  const auto a2 = Upload(RandomBf16(rng, m * inter, 1.0f));
  const auto c1 = Alloc(m * 2 * inter * 4), c2 = Alloc(m * hidden * 4);
  const float one = 1.0f, zero = 0.0f;
  auto gemm = [&](int n, int k, const void* w, const void* xa, void* c) {
    // Column-major: C[n, m] = W^T(k x n stored as [n, k] row-major) * X(k x m).
    if (cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, static_cast<int>(m), k, &one, w, CUDA_R_16BF,
                     k, xa, CUDA_R_16BF, k, &zero, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      std::fprintf(stderr, "moe_gpu_bench: cublasGemmEx failed\n");
      std::exit(1);
    }
  };
  const double dense = TimeDevice(
      [&] {
        gemm(static_cast<int>(2 * inter), static_cast<int>(hidden), gate.data(), a1.data(),
             c1.data());
        gemm(static_cast<int>(hidden), static_cast<int>(inter), down.data(), a2.data(), c2.data());
      },
      reps);
  cublasDestroy(h);
  nlohmann::json params = {{"experts", experts},
                           {"rows_per_expert", rows_per_expert},
                           {"hidden", hidden},
                           {"inter", inter}};
  report.Add({"grouped_expert_ffn_tflops", flops / grouped / 1e12, "TFLOP/s", params,
              Baseline{"cublas_dense_gemm_tflops", flops / dense / 1e12}});
  report.Add({"expert_gemm_over_cublas", dense / grouped, "ratio", params, std::nullopt});
}

void AttentionBandwidth(BenchReport& report, bool quick) {
  const int64_t seqs = 32, ctx = quick ? 512 : 2048, kv_heads = 4, heads = 16, hd = 64, bs = 16;
  const int64_t blocks_per_seq = ctx / bs, num_blocks = seqs * blocks_per_seq;
  const int64_t cache = num_blocks * bs * kv_heads * hd;
  const auto k = Alloc(cache * 4), v = Alloc(cache * 4);
  CUDA_CHECK(cudaMemset(k.data(), 0, cache * 4));
  CUDA_CHECK(cudaMemset(v.data(), 0, cache * 4));
  std::vector<int32_t> tables(num_blocks), pos(seqs), seq(seqs);
  for (int64_t i = 0; i < num_blocks; ++i)
    tables[i] = static_cast<int32_t>((i * 7919) % num_blocks);
  for (int64_t s = 0; s < seqs; ++s) {
    pos[s] = static_cast<int32_t>(ctx - 1);
    seq[s] = static_cast<int32_t>(s);
  }
  const auto d_tab = Upload(tables), d_pos = Upload(pos), d_seq = Upload(seq);
  const auto q = Alloc(seqs * heads * hd * 4), out = Alloc(seqs * heads * hd * 4);
  CUDA_CHECK(cudaMemset(q.data(), 0, seqs * heads * hd * 4));
  const cu::PagedAttentionParams p{.num_blocks = num_blocks,
                                   .block_size = bs,
                                   .num_kv_heads = kv_heads,
                                   .head_dim = hd,
                                   .num_heads = heads,
                                   .max_blocks_per_seq = blocks_per_seq,
                                   .positions = d_pos.as<int32_t>(),
                                   .seq_of_token = d_seq.as<int32_t>(),
                                   .block_tables = d_tab.as<int32_t>()};
  const int reps = quick ? 3 : 20;
  const double attn = TimeDevice(
      [&] {
        BENCH_CHECK(cu::LaunchPagedAttention(p, q.as<float>(), seqs, k.as<float>(), v.as<float>(),
                                             0.125f, out.as<float>(), nullptr));
      },
      reps);
  const double kv_bytes = 2.0 * cache * 4;
  const size_t copy_bytes = size_t{512} << 20;
  const auto src = Alloc(copy_bytes), dst = Alloc(copy_bytes);
  const double copy = TimeDevice(
      [&] { CUDA_CHECK(cudaMemcpy(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice)); },
      reps);
  report.Add({"attention_decode_bandwidth_bytes_s",
              kv_bytes / attn,
              "bytes/s",
              {{"seqs", seqs},
               {"context", ctx},
               {"heads", heads},
               {"kv_heads", kv_heads},
               {"head_dim", hd}},
              Baseline{"device_copy_bandwidth_bytes_s", 2.0 * copy_bytes / copy}});
}

void EngineDecode(BenchReport& report, const SuiteOptions& so) {
  absl::StatusOr<std::string> dir = PresetCheckpoint(so);
  BENCH_CHECK(dir.status());
  auto ckpt = model::Checkpoint::Open(*dir);
  BENCH_CHECK(ckpt.status());
  const model::ModelConfig& c = (*ckpt)->config();
  auto gpu_experts = engine::CudaExpertExecutor::Create(c, (*ckpt)->weights());
  BENCH_CHECK(gpu_experts.status());
  const int64_t prompt = 32, steps = so.quick ? 4 : 32;
  for (int64_t batch : {1, 8}) {
    double tok_s[2] = {0, 0};
    for (int gpu = 0; gpu < 2; ++gpu) {
      engine::EngineOptions eo{.num_threads = so.threads, .kv_num_blocks = batch * 8 + 8};
      auto eng = engine::Engine::Create(
          c, (*ckpt)->weights(), eo,
          gpu ? static_cast<engine::ExpertExecutor*>(gpu_experts->get()) : nullptr);
      BENCH_CHECK(eng.status());
      std::vector<std::vector<int32_t>> tokens(batch), blocks(batch);
      for (int64_t s = 0; s < batch; ++s) {
        for (int64_t i = 0; i < prompt; ++i)
          tokens[s].push_back(static_cast<int32_t>((s * 31 + i * 7) % c.vocab_size));
        for (int64_t b = 0; b < 8; ++b) blocks[s].push_back(static_cast<int32_t>(s * 8 + b));
      }
      engine::StepOutput out;
      double secs = 0;
      for (int64_t step = 0; step <= steps; ++step) {
        std::vector<engine::StepItem> items(batch);
        for (int64_t s = 0; s < batch; ++s) {
          const int64_t start = step == 0 ? 0 : prompt + step - 1;
          items[s].token_ids = absl::MakeConstSpan(tokens[s]).subspan(start);
          items[s].start_pos = static_cast<int32_t>(start);
          items[s].block_table = blocks[s];
        }
        const auto t0 = std::chrono::steady_clock::now();
        BENCH_CHECK((*eng)->Step(items, &out));
        if (step > 0)
          secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (int64_t s = 0; s < batch; ++s) {
          const float* l = out.row(s, 0, c.vocab_size);
          tokens[s].push_back(static_cast<int32_t>(std::max_element(l, l + c.vocab_size) - l));
        }
      }
      tok_s[gpu] = batch * steps / secs;
    }
    report.Add({absl::StrCat("decode_tok_s_b", batch),
                tok_s[1],
                "tok/s",
                {{"preset", so.preset},
                 {"experts", "cuda"},
                 {"dense", "cpu"},
                 {"threads", so.threads},
                 {"decode_steps", steps}},
                Baseline{absl::StrCat("decode_tok_s_b", batch, "_cpu"), tok_s[0]}});
  }
}

}  // namespace
}  // namespace moe::bench

int main(int argc, char** argv) {
  moe::bench::SuiteOptions so;
  so.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::string out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "moe_gpu_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--preset") {
      so.preset = next();
    } else if (a == "--threads") {
      so.threads = std::stoi(next());
    } else if (a == "--quick") {
      so.quick = true;
    } else if (a == "--out") {
      out = next();
    } else if (a == "--cache-dir") {
      so.cache_dir = next();
    } else {
      std::fprintf(stderr, "usage: moe_gpu_bench [--preset P] [--threads N] [--quick] [--out F]\n");
      return 2;
    }
  }
  std::string why;
  if (moe::kernels::cuda::DeviceCount(&why) == 0) {
    std::fprintf(stderr, "moe_gpu_bench: no CUDA device (%s)\n", why.c_str());
    return 3;
  }
  moe::bench::BenchReport report("gpu");
  moe::bench::ExpertGemm(report, so.quick);
  moe::bench::AttentionBandwidth(report, so.quick);
  moe::bench::EngineDecode(report, so);
  const absl::Status s = report.Write(out);
  if (!s.ok()) {
    std::fprintf(stderr, "moe_gpu_bench: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
