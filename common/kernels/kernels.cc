// Public kernel entry points: argument checks, threading, dispatch to the per-ISA table, and the
// small kernels that need no SIMD (RoPE, top-k, KV writes).
#include "common/kernels/kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "common/kernels/dispatch.h"
#include "common/kernels/exp_impl.h"

namespace moe::kernels {
namespace internal {
namespace {

// The AVX-512 table, with the VPDPBUSD q8_0 matmul where the CPU has AVX512-VNNI.
const IsaKernels* Avx512Table() {
  static const IsaKernels table = [] {
    IsaKernels t = kAvx512Kernels;
    if (IsaSupported("avx512_vnni")) t.matmul_q8 = &Avx512VnniMatMulQ8;
    return t;
  }();
  return &table;
}

// The AVX-512 table (VNNI q8_0 included where there) with the native VDPBF16PS kBf16 matmul.
const IsaKernels* Avx512Bf16Table() {
  static const IsaKernels table = [] {
    IsaKernels t = *Avx512Table();
    t.name = "avx512_bf16";
    t.matmul_bf16 = &Avx512Bf16MatMul;
    return t;
  }();
  return &table;
}

const IsaKernels* AutoChoice() {
  if (IsaSupported("avx512_bf16")) return Avx512Bf16Table();
  if (IsaSupported("avx512")) return Avx512Table();
  if (IsaSupported("avx2")) return &kAvx2Kernels;
  return &kPortableKernels;
}

// The table of a named path, or null for an unknown name. REQUIRES: IsaSupported(isa) or unknown.
const IsaKernels* TableOf(const char* isa) {
  if (std::strcmp(isa, "avx512_bf16") == 0) return Avx512Bf16Table();
  if (std::strcmp(isa, "avx512") == 0) return Avx512Table();
  if (std::strcmp(isa, "avx2") == 0) return &kAvx2Kernels;
  if (std::strcmp(isa, "portable") == 0) return &kPortableKernels;
  return nullptr;
}

// SelectIsa's choice (null: AutoChoice), and ForceIsaForTesting's override of it.
std::atomic<const IsaKernels*> g_selected{nullptr};
std::atomic<const IsaKernels*> g_forced{nullptr};

#if defined(__x86_64__)
// CPUID.1:ECX.F16C[bit 29]: clang before 15 does not take "f16c" in __builtin_cpu_supports.
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

}  // namespace

bool IsaSupported(const char* isa) {
  if (std::strcmp(isa, "portable") == 0) return true;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && CpuHasF16c();
  if (std::strcmp(isa, "avx2") == 0) return avx2;
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512dq");
  if (std::strcmp(isa, "avx512") == 0) return avx512;
  if (std::strcmp(isa, "avx512_bf16") == 0) {
    return avx512 && __builtin_cpu_supports("avx512bf16");
  }
  if (std::strcmp(isa, "avx512_vnni") == 0) {
    return avx512 && __builtin_cpu_supports("avx512vnni");
  }
#endif
  return false;
}

const IsaKernels& Active() {
  if (const IsaKernels* forced = g_forced.load(std::memory_order_relaxed)) return *forced;
  if (const IsaKernels* selected = g_selected.load(std::memory_order_relaxed)) return *selected;
  static const IsaKernels* const chosen = AutoChoice();
  return *chosen;
}

bool ForceIsaForTesting(const char* isa) {
  if (isa == nullptr) {
    g_forced.store(nullptr);
    return true;
  }
  const IsaKernels* table = TableOf(isa);
  if (table == nullptr || !IsaSupported(isa)) return false;
  g_forced.store(table);
  return true;
}

void ExpForTesting(const float* in, float* out, int64_t n) { Active().exp(in, out, n); }

}  // namespace internal

namespace {

using internal::Active;

// Below this many multiply-adds a matmul runs on the caller's thread (a pool wake-up costs more).
constexpr int64_t kMinParallelMacs = 1 << 16;

// fn over [0, n) in chunks of `grain` taken in turn by whichever pool threads run (see
// ThreadPool::ParallelForDynamic): a thread descheduled on a busy machine delays nobody.
void Parallel(ThreadPool* pool, int64_t n, int64_t grain,
              const std::function<void(int64_t, int64_t)>& fn) {
  if (pool == nullptr || pool->num_threads() <= 1) {
    if (n > 0) fn(0, n);
  } else {
    pool->ParallelForDynamic(n, grain, fn);
  }
}

// Column chunk for `total_rows` W rows split over `threads`: about 8 chunks per thread (dynamic
// balance), a multiple of 16 (every ISA's register tile width divides it), at most 512.
int64_t ChunkRows(int64_t total_rows, int threads) {
  const int64_t want = (total_rows + 8 * threads - 1) / (8 * threads);
  return std::clamp<int64_t>((want + 15) / 16 * 16, 16, 512);
}

// Whether a MatMul of `w` in mode `act` takes the kBf16 path (bf16 weights only; kernels.h).
bool UsesBf16(Activations act, const WeightView& w) {
  return act == Activations::kBf16 && w.dtype == DType::kBF16;
}

using MatMulFn = void (*)(const internal::MatMulArgs&, int64_t, int64_t);
MatMulFn KernelOf(const internal::IsaKernels& isa, const internal::MatMulArgs& a) {
  if (a.w_dtype == internal::kDtQ8) return isa.matmul_q8;
  return a.xb != nullptr ? isa.matmul_bf16 : isa.matmul;
}

// q8_0 weights need whole 32-blocks (kernels.h INT8 WEIGHTS).
void CheckQ8Cols(const WeightView& w) {
  if (w.dtype == DType::kQ8_0) {
    MOE_CHECK_MSG(w.cols % common::kQ8BlockSize == 0,
                  "MatMul: q8_0 weights need cols (k) a multiple of 32");
  }
}

// The activation quantization of the q8_0 matmul (QuantizeActivationsQ8 on the active path:
// bitwise the scalar definition) of x[m, k] into xq / xd; rows split over the pool when large.
void QuantizeX(const float* x, int64_t m, int64_t k, int8_t* xq, float* xd, ThreadPool* pool) {
  const auto& isa = Active();
  const int64_t nb = k / common::kQ8BlockSize;
  if (pool == nullptr || pool->num_threads() <= 1 || m < 2 * pool->num_threads() ||
      m * k < (1 << 18)) {
    isa.quantize_q8(x, m, k, xq, xd);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, m / (4 * pool->num_threads()));
  pool->ParallelForDynamic(m, grain, [&](int64_t b, int64_t e) {
    isa.quantize_q8(x + b * k, e - b, k, xq + b * k, xd + b * nb);
  });
}

// f32 copy of a small weight vector (norm weights), reusing a per-thread buffer.
const float* AsF32(const WeightView& w, int64_t n) {
  if (w.dtype == DType::kF32) return static_cast<const float*>(w.data);
  thread_local std::vector<float> buf;
  buf.resize(n);
  Active().convert(w.data, static_cast<int>(w.dtype), n, buf.data());
  return buf.data();
}

}  // namespace

void MatMul(const float* x, int64_t m, const WeightView& w, float* y, ThreadPool* pool,
            const WeightView* bias, Activations act) {
  MOE_CHECK(m >= 0 && w.rows >= 0 && w.cols >= 1);
  if (m == 0 || w.rows == 0) return;
  const bool has_bias = bias != nullptr && bias->data != nullptr;
  internal::MatMulArgs args{x,
                            m,
                            w.cols,
                            w.data,
                            static_cast<int>(w.dtype),
                            w.rows,
                            has_bias ? bias->data : nullptr,
                            has_bias ? static_cast<int>(bias->dtype) : 0,
                            y,
                            nullptr,
                            nullptr,
                            nullptr};
  thread_local std::vector<uint16_t> xb_buf;
  thread_local std::vector<int8_t> xq_buf;
  thread_local std::vector<float> xd_buf;
  CheckQ8Cols(w);
  if (w.dtype == DType::kQ8_0) {
    xq_buf.resize(static_cast<size_t>(m * w.cols));
    xd_buf.resize(static_cast<size_t>(m * (w.cols / common::kQ8BlockSize)));
    QuantizeX(x, m, w.cols, xq_buf.data(), xd_buf.data(), pool);
    args.xq = xq_buf.data();
    args.xd = xd_buf.data();
  } else if (UsesBf16(act, w)) {
    xb_buf.resize(static_cast<size_t>(m * w.cols));
    RoundToBf16(x, m * w.cols, xb_buf.data());
    args.xb = xb_buf.data();
  }
  const auto& isa = Active();
  const auto kernel = KernelOf(isa, args);
  if (pool == nullptr || m * w.rows * w.cols < kMinParallelMacs) {
    kernel(args, 0, w.rows);
    return;
  }
  if (w.rows < 32 * pool->num_threads() && m >= 4 * pool->num_threads()) {
    // Few outputs, many rows (router gates): split the rows instead. Every element is computed
    // the same way whoever computes it, so the split never changes results.
    const int64_t grain = std::max<int64_t>(4, (m / (4 * pool->num_threads())) / 4 * 4);
    Parallel(pool, m, grain, [&](int64_t b, int64_t e) {
      internal::MatMulArgs part = args;
      part.x = x + b * w.cols;
      if (args.xb != nullptr) part.xb = args.xb + b * w.cols;
      if (args.xq != nullptr) {
        part.xq = args.xq + b * w.cols;
        part.xd = args.xd + b * (w.cols / common::kQ8BlockSize);
      }
      part.y = y + b * w.rows;
      part.m = e - b;
      kernel(part, 0, w.rows);
    });
    return;
  }
  Parallel(pool, w.rows, ChunkRows(w.rows, pool->num_threads()),
           [&](int64_t b, int64_t e) { kernel(args, b, e); });
}

namespace {

// A column range [j0, j1) of one task of MatMulMany / SwiGluMany.
struct WorkItem {
  int64_t task;
  int64_t j0, j1;
};

void AppendItems(int64_t task, int64_t rows, int64_t chunk, std::vector<WorkItem>* items) {
  for (int64_t j = 0; j < rows; j += chunk) items->push_back({task, j, std::min(rows, j + chunk)});
}

// Runs fn(item) for every item: on the caller alone, or with the pool's threads taking items in
// turn (balanced whatever the items cost; one fork/join in all).
template <typename Fn>
void RunItems(ThreadPool* pool, int64_t num_items, bool parallel, const Fn& fn) {
  if (!parallel || pool == nullptr || pool->num_threads() <= 1 || num_items <= 1) {
    for (int64_t i = 0; i < num_items; ++i) fn(i);
    return;
  }
  pool->ParallelForDynamic(num_items, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(i);
  });
}

internal::MatMulArgs ArgsOf(const float* x, int64_t m, const WeightView& w, float* y,
                            const WeightView* bias) {
  const bool has_bias = bias != nullptr && bias->data != nullptr;
  return {x,
          m,
          w.cols,
          w.data,
          static_cast<int>(w.dtype),
          w.rows,
          has_bias ? bias->data : nullptr,
          has_bias ? static_cast<int>(bias->dtype) : 0,
          y,
          nullptr,
          nullptr,
          nullptr};
}

// Rounds the x of every kBf16 argument set to bf16 into `buf` (one copy per distinct (x, m, k):
// q/k/v share theirs), and points their xb at it. `use[i]` says whether args[i] is kBf16.
void PrepareBf16(std::vector<internal::MatMulArgs>& args, const std::vector<uint8_t>& use,
                 std::vector<uint16_t>& buf) {
  size_t total = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (use[i]) total += static_cast<size_t>(args[i].m * args[i].k);
  }
  if (total == 0) return;
  if (buf.size() < total) buf.resize(total);
  size_t off = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!use[i] || args[i].m == 0) continue;
    for (size_t j = 0; j < i; ++j) {
      if (use[j] && args[j].x == args[i].x && args[j].m == args[i].m && args[j].k == args[i].k &&
          args[j].xb != nullptr) {
        args[i].xb = args[j].xb;
        break;
      }
    }
    if (args[i].xb != nullptr) continue;
    RoundToBf16(args[i].x, args[i].m * args[i].k, buf.data() + off);
    args[i].xb = buf.data() + off;
    off += static_cast<size_t>(args[i].m * args[i].k);
  }
}

// Quantizes the x of every q8_0-weight argument set (QuantizeActivationsQ8) into `q` / `d`, one
// copy per distinct (x, m, k) (gate and up, q/k/v share theirs), and points their xq / xd at it.
void PrepareQ8(std::vector<internal::MatMulArgs>& args, std::vector<int8_t>& q,
               std::vector<float>& d, ThreadPool* pool) {
  size_t total = 0;
  for (const internal::MatMulArgs& a : args) {
    if (a.w_dtype == internal::kDtQ8) total += static_cast<size_t>(a.m * a.k);
  }
  if (total == 0) return;
  if (q.size() < total) q.resize(total);
  if (d.size() < total / common::kQ8BlockSize) d.resize(total / common::kQ8BlockSize);
  size_t off = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    internal::MatMulArgs& a = args[i];
    if (a.w_dtype != internal::kDtQ8 || a.m == 0) continue;
    for (size_t j = 0; j < i; ++j) {
      const internal::MatMulArgs& o = args[j];
      if (o.w_dtype == internal::kDtQ8 && o.x == a.x && o.m == a.m && o.k == a.k &&
          o.xq != nullptr) {
        a.xq = o.xq;
        a.xd = o.xd;
        break;
      }
    }
    if (a.xq != nullptr) continue;
    a.xq = q.data() + off;
    a.xd = d.data() + off / common::kQ8BlockSize;
    QuantizeX(a.x, a.m, a.k, q.data() + off, d.data() + off / common::kQ8BlockSize, pool);
    off += static_cast<size_t>(a.m * a.k);
  }
}

// The per-thread scratch of MatMulMany / SwiGluMany (they never nest on one thread). The
// parallel lambdas read it through plain pointers: a thread_local named inside them would be the
// worker thread's own, empty, copy.
struct ManyScratch {
  std::vector<internal::MatMulArgs> args;
  std::vector<uint8_t> use_bf16;  // per args entry
  std::vector<uint16_t> xb;       // bf16-rounded inputs
  std::vector<int8_t> xq;         // q8-quantized inputs (q8_0 weights)
  std::vector<float> xd;          // and their block scales
  std::vector<WorkItem> items;

  void Add(const internal::MatMulArgs& a, Activations act, const WeightView& w) {
    args.push_back(a);
    use_bf16.push_back(UsesBf16(act, w) ? 1 : 0);
  }
  // Rounds the bf16-mode inputs, then cuts each task's `rows_of(t)` output rows (tasks with m > 0
  // only) into chunks for the pool's threads.
  template <typename RowsOf>
  void Plan(int64_t num_tasks, int64_t total_rows, const RowsOf& rows_of, ThreadPool* pool) {
    PrepareBf16(args, use_bf16, xb);
    PrepareQ8(args, xq, xd, pool);
    const int threads = pool == nullptr ? 1 : pool->num_threads();
    const int64_t chunk = ChunkRows(total_rows, threads);
    for (int64_t t = 0; t < num_tasks; ++t) {
      const int64_t rows = rows_of(t);
      if (rows >= 0) AppendItems(t, rows, chunk, &items);
    }
  }
};

ManyScratch& ClearedScratch() {
  thread_local ManyScratch scratch;
  scratch.args.clear();
  scratch.use_bf16.clear();
  scratch.items.clear();
  return scratch;
}

}  // namespace

void MatMulMany(const MatMulTask* tasks, int64_t num_tasks, ThreadPool* pool) {
  ManyScratch& s = ClearedScratch();
  int64_t total_rows = 0, macs = 0;
  for (int64_t t = 0; t < num_tasks; ++t) {
    const MatMulTask& task = tasks[t];
    MOE_CHECK(task.m >= 0 && task.w.rows >= 0 && task.w.cols >= 1);
    CheckQ8Cols(task.w);
    s.Add(ArgsOf(task.x, task.m, task.w, task.y, task.bias), task.activations, task.w);
    if (task.m > 0) total_rows += task.w.rows;
    macs += task.m * task.w.rows * task.w.cols;
  }
  s.Plan(
      num_tasks, total_rows,
      [&](int64_t t) { return tasks[t].m > 0 ? tasks[t].w.rows : int64_t{-1}; }, pool);
  const auto& isa = Active();
  const WorkItem* item_at = s.items.data();
  const internal::MatMulArgs* args_at = s.args.data();
  RunItems(pool, static_cast<int64_t>(s.items.size()), macs >= kMinParallelMacs, [&](int64_t i) {
    const WorkItem& it = item_at[i];
    KernelOf(isa, args_at[it.task])(args_at[it.task], it.j0, it.j1);
  });
}

void SwiGluMany(const SwiGluTask* tasks, int64_t num_tasks, ThreadPool* pool) {
  ManyScratch& s = ClearedScratch();  // args: gate, up of each task
  int64_t total_rows = 0, macs = 0;
  for (int64_t t = 0; t < num_tasks; ++t) {
    const SwiGluTask& task = tasks[t];
    MOE_CHECK(task.m >= 0 && task.gate.cols >= 1 && task.gate.rows == task.up.rows &&
              task.gate.cols == task.up.cols);
    CheckQ8Cols(task.gate);
    CheckQ8Cols(task.up);
    s.Add(ArgsOf(task.x, task.m, task.gate, task.act, nullptr), task.activations, task.gate);
    s.Add(ArgsOf(task.x, task.m, task.up, task.up_scratch, nullptr), task.activations, task.up);
    if (task.m > 0) total_rows += task.gate.rows;
    macs += 2 * task.m * task.gate.rows * task.gate.cols;
  }
  s.Plan(
      num_tasks, total_rows,
      [&](int64_t t) { return tasks[t].m > 0 ? tasks[t].gate.rows : int64_t{-1}; }, pool);
  const auto& isa = Active();
  const WorkItem* item_at = s.items.data();
  const internal::MatMulArgs* args_at = s.args.data();
  RunItems(pool, static_cast<int64_t>(s.items.size()), macs >= kMinParallelMacs, [&](int64_t i) {
    const WorkItem& it = item_at[i];
    const SwiGluTask& task = tasks[it.task];
    const internal::MatMulArgs& gate = args_at[2 * it.task];
    const internal::MatMulArgs& up = args_at[2 * it.task + 1];
    KernelOf(isa, gate)(gate, it.j0, it.j1);
    KernelOf(isa, up)(up, it.j0, it.j1);
    const int64_t inter = task.gate.rows;
    for (int64_t r = 0; r < task.m; ++r) {
      isa.silu_mul(task.act + r * inter + it.j0, task.up_scratch + r * inter + it.j0,
                   it.j1 - it.j0);
    }
  });
}

void RmsNorm(const float* x, int64_t m, int64_t d, const WeightView& weight, float eps,
             float* out) {
  if (m <= 0 || d <= 0) return;
  Active().rms_norm(x, m, d, AsF32(weight, d), eps, out);
}

void ApplyRope(float* x, int64_t m, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
               const int32_t* positions, float theta) {
  MOE_CHECK(rotary_dim % 2 == 0 && rotary_dim <= head_dim);
  const int64_t half = rotary_dim / 2;
  if (half == 0) return;
  // As HF: inv_freq = 1 / theta ** (arange(0, dim, 2).float() / dim), all f32;
  // freqs = float(pos) * inv_freq; emb = cat(freqs, freqs); x*cos + rotate_half(x)*sin.
  thread_local std::vector<float> inv_freq, cos_v, sin_v;
  inv_freq.resize(half);
  cos_v.resize(half);
  sin_v.resize(half);
  for (int64_t j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(rotary_dim);
    inv_freq[j] = 1.0f / std::pow(theta, exponent);
  }
  for (int64_t i = 0; i < m; ++i) {
    const float pos = static_cast<float>(positions[i]);
    for (int64_t j = 0; j < half; ++j) {
      const float angle = pos * inv_freq[j];
      cos_v[j] = std::cos(angle);
      sin_v[j] = std::sin(angle);
    }
    for (int64_t h = 0; h < num_heads; ++h) {
      float* v = x + (i * num_heads + h) * head_dim;
      for (int64_t j = 0; j < half; ++j) {
        const float x1 = v[j];
        const float x2 = v[j + half];
        v[j] = x1 * cos_v[j] + (-x2) * sin_v[j];
        v[j + half] = x2 * cos_v[j] + x1 * sin_v[j];
      }
    }
  }
}

void Softmax(float* x, int64_t m, int64_t n) {
  if (m <= 0 || n <= 0) return;
  Active().softmax(x, m, n);
}

void SiluMul(float* gate, const float* up, int64_t n) {
  if (n <= 0) return;
  Active().silu_mul(gate, up, n);
}

void TopKGating(const float* logits, int64_t m, int64_t num_experts, int64_t k, bool normalize,
                TopK out) {
  MOE_CHECK(k >= 1 && k <= num_experts);
  thread_local std::vector<float> probs;
  thread_local std::vector<int32_t> ids;
  probs.resize(num_experts);
  ids.resize(num_experts);
  for (int64_t i = 0; i < m; ++i) {
    std::memcpy(probs.data(), logits + i * num_experts, num_experts * sizeof(float));
    Active().softmax(probs.data(), 1, num_experts);
    for (int64_t e = 0; e < num_experts; ++e) ids[e] = static_cast<int32_t>(e);
    // Descending weight, ties broken by the lower expert id.
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += probs[ids[j]];
    for (int64_t j = 0; j < k; ++j) {
      out.expert_ids[i * k + j] = ids[j];
      out.weights[i * k + j] = normalize ? probs[ids[j]] / sum : probs[ids[j]];
    }
  }
}

void WriteKv(const float* k, const float* v, int64_t m, const AttentionToken* tokens,
             const PagedKvLayout& layout, float* k_cache, float* v_cache) {
  const int64_t row = layout.num_kv_heads * layout.head_dim;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t pos = tokens[i].position;
    const int64_t block = tokens[i].block_table[pos / layout.block_size];
    MOE_DCHECK(block >= 0 && block < layout.num_blocks);
    const int64_t off = (block * layout.block_size + pos % layout.block_size) * row;
    std::memcpy(k_cache + off, k + i * row, row * sizeof(float));
    std::memcpy(v_cache + off, v + i * row, row * sizeof(float));
  }
}

void PagedAttention(const float* q, int64_t m, int64_t num_heads, const AttentionToken* tokens,
                    const PagedKvLayout& layout, const float* k_cache, const float* v_cache,
                    float scale, float* out, ThreadPool* pool) {
  if (m <= 0) return;
  MOE_CHECK(layout.head_dim >= 1 && layout.head_dim <= internal::kMaxHeadDim);
  MOE_CHECK(layout.block_size >= 1 && layout.block_size <= internal::kMaxBlockSize);
  MOE_CHECK(layout.num_kv_heads >= 1 && num_heads % layout.num_kv_heads == 0);
  const internal::AttentionArgs args{q, m, num_heads, tokens, layout, k_cache, v_cache, scale, out};
  const auto& isa = Active();
  const int threads = pool == nullptr ? 1 : pool->num_threads();
  const int64_t group = num_heads / layout.num_kv_heads;
  if (m < 2 * threads) {  // decode: chunks of whole KV-head groups of (token, head) items
    Parallel(pool, m * num_heads, group, [&](int64_t b, int64_t e) { isa.attention(args, b, e); });
    return;
  }
  // Prefill: units (KV head, tile), KV head outermost so one head's keys and values stay in L2
  // across consecutive units. A tile is a run of consecutive tokens of one sequence (one block
  // table) whose (token, head) items fill up to 16 lanes, so the ISA path can read each key/value
  // row once for all of them; tokens of distinct sequences (a decode batch) are a unit each.
  // Causal rows grow with position, so chunks are small (dynamic balance).
  const int64_t tile = std::max<int64_t>(1, 16 / group);
  thread_local std::vector<int64_t> tile_begin;  // tiles' first tokens, then m
  tile_begin.clear();
  for (int64_t i = 0; i < m;) {
    tile_begin.push_back(i);
    const int64_t first = i++;
    while (i < m && i - first < tile && tokens[i].block_table == tokens[first].block_table) ++i;
  }
  tile_begin.push_back(m);
  const int64_t* starts = tile_begin.data();  // the workers read the caller's vector
  const int64_t tiles = static_cast<int64_t>(tile_begin.size()) - 1;
  const int64_t units = layout.num_kv_heads * tiles;
  const int64_t grain = std::max<int64_t>(1, units / (16 * threads));
  Parallel(pool, units, grain, [&](int64_t b, int64_t e) {
    internal::AttentionArgs unit = args;
    for (int64_t u = b; u < e; ++u) {
      unit.kv_head = u / tiles;
      isa.attention(unit, starts[u % tiles], starts[u % tiles + 1]);
    }
  });
}

void ConvertToF32(const void* src, DType dtype, int64_t n, float* dst) {
  if (n <= 0) return;
  if (dtype == DType::kQ8_0) {  // one q8_0 row of n elements: d * q, exact in f32
    MOE_CHECK_MSG(n % common::kQ8BlockSize == 0,
                  "ConvertToF32: a q8_0 row has a multiple of 32 elements");
    for (int64_t j = 0; j < n; ++j) dst[j] = common::Q8_0At(src, n, 0, j);
    return;
  }
  Active().convert(src, static_cast<int>(dtype), n, dst);
}

void QuantizeActivationsQ8(const float* x, int64_t m, int64_t k, int8_t* q, float* d) {
  MOE_CHECK_MSG(k % common::kQ8BlockSize == 0, "QuantizeActivationsQ8: k must be a multiple of 32");
  if (m <= 0) return;
  // The portable table's is the scalar definition (isa_common.inc); the other paths match it.
  internal::kPortableKernels.quantize_q8(x, m, k, q, d);
}

absl::Status QuantizeRowsQ8_0(const void* src, DType dtype, int64_t rows, int64_t cols, void* dst,
                              ThreadPool* pool) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeRowsQ8_0: source dtype ",
                                                   std::string(common::DTypeName(dtype)),
                                                   " (want f32, bf16 or f16)"));
  }
  if (cols <= 0 || cols % common::kQ8BlockSize != 0 || rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QuantizeRowsQ8_0: cols ", cols, " is not a positive multiple of 32 (rows ", rows, ")"));
  }
  const int64_t in_row = cols * common::DTypeSize(dtype);
  const int64_t out_row = common::RowBytes(DType::kQ8_0, cols);
  auto run = [&](int64_t r0, int64_t r1) {
    float blk[common::kQ8BlockSize];
    for (int64_t r = r0; r < r1; ++r) {
      const char* in = static_cast<const char*>(src) + r * in_row;
      char* out = static_cast<char*>(dst) + r * out_row;
      int8_t* q = reinterpret_cast<int8_t*>(out);
      for (int64_t b = 0; b < cols / common::kQ8BlockSize; ++b) {
        for (int64_t j = 0; j < common::kQ8BlockSize; ++j) {
          const int64_t e = b * common::kQ8BlockSize + j;
          if (dtype == DType::kF32) {
            std::memcpy(&blk[j], in + 4 * e, 4);
          } else {
            uint16_t h;
            std::memcpy(&h, in + 2 * e, 2);
            blk[j] = dtype == DType::kBF16 ? common::Bf16ToF32(h) : common::F16ToF32(h);
          }
        }
        float amax = 0.0f;  // NaN never wins the comparison, as the activations' rule
        for (float v : blk) {
          const float a = std::fabs(v);
          amax = a > amax ? a : amax;
        }
        const uint16_t dh = common::F32ToF16(amax / 127.0f);
        const float d = common::F16ToF32(dh);
        std::memcpy(out + cols + 2 * b, &dh, 2);
        for (int64_t j = 0; j < common::kQ8BlockSize; ++j) {
          int8_t v = 0;
          if (d != 0.0f) {
            float t = blk[j] / d;
            t = t > -127.0f ? t : -127.0f;  // maxps semantics: NaN -> -127
            t = t < 127.0f ? t : 127.0f;
            v = static_cast<int8_t>(static_cast<int>(std::nearbyint(t)));
          }
          q[b * common::kQ8BlockSize + j] = v;
        }
      }
    }
  };
  if (rows > 0) {
    Parallel(pool, rows, std::max<int64_t>(1, rows / (8 * (pool ? pool->num_threads() : 1))), run);
  }
  return absl::OkStatus();
}

const char* ActiveIsa() { return Active().name; }

absl::Status SelectIsa(std::string_view isa) {
  if (isa.empty() || isa == "auto") {
    internal::g_selected.store(nullptr);
    return absl::OkStatus();
  }
  const std::string name(isa);
  const internal::IsaKernels* table = internal::TableOf(name.c_str());
  if (table == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown kernel ISA \"", name, "\" (auto, avx512_bf16, avx512, avx2, portable)"));
  }
  if (!internal::IsaSupported(name.c_str())) {
    return absl::FailedPreconditionError(
        absl::StrCat("this CPU cannot run the \"", name, "\" kernels"));
  }
  internal::g_selected.store(table);
  return absl::OkStatus();
}

absl::Status SelectIsaFromEnvironment(const char* env_value) {
  if (env_value == nullptr) return absl::OkStatus();
  if (absl::Status s = SelectIsa(env_value); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("MOE_KERNELS_ISA: ", s.message()));
  }
  return absl::OkStatus();
}

const char* ActivationsName(Activations a) { return a == Activations::kBf16 ? "bf16" : "f32"; }

void RoundToBf16(const float* src, int64_t n, uint16_t* dst) {
  if (n > 0) Active().round_bf16(src, n, dst);
}

}  // namespace moe::kernels
