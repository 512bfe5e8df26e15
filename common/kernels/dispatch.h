// Internal: the per-ISA kernel table behind kernels.h, and test hooks. Not for engine code.
//
// Each ISA translation unit (isa_portable.cc, isa_avx2.cc, isa_avx512.cc) is compiled with its own
// target flags and exports one table of plain functions over plain pointers. Those units include
// no code templates shared with the rest of the library (no std::vector, std::function, dtype.h
// helpers): an inline function emitted there with AVX-512 instructions could otherwise be picked
// by the linker for baseline callers. Threading and argument checks live in kernels.cc (baseline).
#pragma once

#include <cstdint>

#include "common/kernels/kernels.h"

namespace moe::kernels::internal {

// Element types as plain ints in the ISA units (values of common::DType).
inline constexpr int kDtF32 = 0;
inline constexpr int kDtBf16 = 1;
inline constexpr int kDtF16 = 2;
inline constexpr int kDtQ8 = 3;  // q8_0 (kernels.h INT8 WEIGHTS): only in matmul_q8

// Fixed stack workspace limits of PagedAttention (checked in kernels.cc).
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxBlockSize = 1024;

struct MatMulArgs {
  const float* x;  // [m, k]
  int64_t m;
  int64_t k;
  const void* w;  // [n, k], dtype w_dtype
  int w_dtype;
  int64_t n;
  const void* bias;  // [n] or null, dtype bias_dtype
  int bias_dtype;
  float* y;  // [m, n]
  // kBf16 mode (bf16 weights only): x rounded by RoundToBf16, [m, k]; null in kF32 mode.
  const uint16_t* xb = nullptr;
  // q8_0 weights (w_dtype kDtQ8): x quantized by QuantizeActivationsQ8, xq [m, k] int8 and
  // xd [m, k / 32] f32 scales; null otherwise.
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
};

struct AttentionArgs {
  const float* q;  // [m, num_heads, head_dim]
  int64_t m;
  int64_t num_heads;
  const AttentionToken* tokens;
  PagedKvLayout layout;
  const float* k_cache;
  const float* v_cache;
  float scale;
  float* out;
  // -1: the attention call's [begin, end) are (token, head) items of the flattened index
  // token * num_heads + head. >= 0: they are tokens, each with the query heads of this KV head.
  int64_t kv_head = -1;
};

struct IsaKernels {
  const char* name;
  // Columns [n_begin, n_end) of y for all m rows.
  void (*matmul)(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
  // weight is f32 [d].
  void (*rms_norm)(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                   float* out);
  void (*softmax)(float* x, int64_t m, int64_t n);
  void (*silu_mul)(float* gate, const float* up, int64_t n);
  // Work items [begin, end): (token, head) items, or tokens of one KV head
  // (AttentionArgs::kv_head).
  void (*attention)(const AttentionArgs& a, int64_t begin, int64_t end);
  // out[i] = ExpF(in[i]) (the one exp of every path; see exp_impl.h).
  void (*exp)(const float* in, float* out, int64_t n);
  void (*convert)(const void* src, int dtype, int64_t n, float* dst);
  // The kBf16-mode matmul (kernels.h BF16-ACTIVATION MODE): a.xb set, a.w bf16.
  void (*matmul_bf16)(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
  // RoundToBf16 (integer operations only: every path gives the same bits).
  void (*round_bf16)(const float* src, int64_t n, uint16_t* dst);
  // The q8_0 matmul (kernels.h INT8 WEIGHTS): a.w q8_0 rows, a.xq / a.xd set, a.k % 32 == 0.
  void (*matmul_q8)(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
  // QuantizeActivationsQ8 of rows [0, m) (kernels.h; bitwise the scalar definition on every path).
  void (*quantize_q8)(const float* x, int64_t m, int64_t k, int8_t* q, float* d);
};

extern const IsaKernels kPortableKernels;
extern const IsaKernels kAvx2Kernels;
extern const IsaKernels kAvx512Kernels;
// The native VDPBF16PS kernel (isa_avx512bf16.cc); the "avx512_bf16" table is kAvx512Kernels
// with this as matmul_bf16 (built in kernels.cc).
void Avx512Bf16MatMul(const MatMulArgs& a, int64_t n_begin, int64_t n_end);
// The VPDPBUSD q8_0 matmul (isa_avx512vnni.cc); the avx512 and avx512_bf16 tables use it as
// matmul_q8 where IsaSupported("avx512_vnni") (kAvx512Kernels.matmul_q8 is the AVX512BW one).
void Avx512VnniMatMulQ8(const MatMulArgs& a, int64_t n_begin, int64_t n_end);

// The table in use: the best this CPU supports, unless SelectIsa (kernels.h) chose another, or
// ForceIsaForTesting overrode both.
const IsaKernels& Active();

// Whether this CPU (and OS) can run the named path; also "avx512_vnni" (avx512 plus VPDPBUSD, no
// table of its own: it upgrades the q8_0 matmul of the avx512 and avx512_bf16 tables).
bool IsaSupported(const char* isa);

// Switches every later kernel call to `isa` ("avx512_bf16", "avx512", "avx2", "portable"), or back
// to the automatic choice for nullptr. Returns false (and changes nothing) if the CPU lacks it. Not
// thread-safe with concurrent kernel calls; for tests and benchmarks.
bool ForceIsaForTesting(const char* isa);

// ExpF on the active path, for tests.
void ExpForTesting(const float* in, float* out, int64_t n);

}  // namespace moe::kernels::internal
