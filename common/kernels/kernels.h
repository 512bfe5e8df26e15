// CPU kernels of the forward pass. Runtime ISA dispatch (AVX-512 / AVX2+FMA / portable) happens
// inside; callers never see it.
//
// NUMERICS CONTRACT (DESIGN.md §3, batch invariance). Every output element is computed by one
// fixed sequence of f32 operations that depends only on that element's own inputs, never on
// `m` (how many rows share the call), on the thread count, on which ISA path runs, or on where a
// row sits in the batch. Concretely, a dot product over k is accumulated in 16 lanes (lane l takes
// k = l, l+16, l+32, ... in increasing order, with fused multiply-add, zero padding past k), then
// the 16 lanes are reduced by the fixed tree ((0+8),(1+9),...) -> 8 -> 4 -> 2 -> 1. AVX2 keeps the
// 16 lanes in two ymm registers, the portable path in an array with std::fma, so all three paths
// are bitwise identical. Results therefore match across processes and machines of either ISA.
//
// Weights are in Hugging Face Linear layout: W[n, k] row-major (n = out features), f32/bf16/f16,
// converted to f32 exactly in registers. Activations and accumulation are f32.
//
// BF16-ACTIVATION MODE (Activations::kBf16; opt-in, a cluster-wide setting like the weights'
// dtype: every process of a cluster must use the same mode to compute bit-identically). It applies
// to MatMul / MatMulMany / SwiGluMany with bf16 weights only; with f32/f16 weights kBf16 computes
// exactly as kF32 (the f32 path above). For bf16 weights each output element is:
//   1. the activation row is rounded to bf16 by RoundToBf16 (below): an f32 denormal becomes a
//      zero of its sign (DAZ), then round-to-nearest-even (ties to even; overflow -> inf), NaN ->
//      a quiet NaN;
//   2. the dot product over k runs in 16 f32 lanes; k is cut into 32-element chunks (the last one
//      zero-padded); in chunk c, lane l takes the pair p0 = 32c + 2l, p1 = p0 + 1 and does, in this
//      order, acc = ftz(fma(x[p1], daz(w[p1]), acc)); acc = ftz(fma(x[p0], daz(w[p0]), acc)),
//      where each fma is one RNE rounding of the exact product-sum (a bf16 x bf16 product is exact
//      in f32), daz() maps a denormal bf16 weight to a zero of its sign and ftz() maps a denormal
//      result to a zero of its sign. That is exactly VDPBF16PS (Intel's pseudo-code: odd element
//      first, "FP32 FMA with DAZ in, FTZ out and RNE rounding"; checked bit for bit on Zen 4);
//   3. the 16 lanes are reduced by the same tree as above, in f32 (no flushing), then + bias.
// The "avx512_bf16" path runs VDPBF16PS; avx512/avx2/portable emulate it with f32 FMAs and the
// explicit flushes (slower than their f32 path: kBf16 pays off only on AVX-512 BF16 machines).
// All paths are bitwise identical, except that ftz() in the emulation flushes a result whose
// exact value lies within 2^-150 below 2^-126 by the subnormal rounding's verdict where x86's
// "tininess after rounding" may differ: results within 1 ulp of FLT_MIN, never met by activations.
// Error bound: |y - dot_double(bf16(x), w)| <= (k/16 + 5) * u * sum|bf16(x) w|, u = 2^-24 (each
// lane adds at most k/16 + 1 roundings, the tree 4), plus flushed-denormal terms (< 2^-126 each).
//
// INT8 WEIGHTS (DType::kQ8_0, W8A8; opt-in, a cluster-wide numerics setting like the activation
// mode: model::WeightsMode, EngineOptions::weights). A q8_0 matrix W[n, k] (k % 32 == 0) stores
// each row as k int8 values q[0..k) in -127..127, then k/32 IEEE-half scales d[0..k/32)
// (little-endian): element j is d[j / 32] * q[j]. QuantizeRowsQ8_0 (below) makes one. A MatMul
// (MatMulMany, SwiGluMany) with q8_0 weights computes, whatever the Activations mode (W8A8 has its
// own activation numerics):
//   1. each 32-block b of the activation row x is quantized by QuantizeActivationsQ8 (below):
//      xq[j] in -127..127 and one f32 scale xd[b];
//   2. the dot product runs in 16 f32 lanes over 64-element chunks: in chunk c, lane l takes the
//      4 elements e = 64c + 4l .. 64c + 4l + 3 of block b = 2c + l / 8, their integer dot product
//      s = sum q[e] * xq[e] (exact in int32), and does acc[l] = fma(float(s), sd, acc[l]) where
//      sd = float(d[b]) * xd[b] (one f32 rounding). When k / 32 is odd, the last chunk has block
//      2c only and lanes 8..15 skip it;
//   3. the 16 lanes are reduced by the tree of the f32 contract, then + bias (f32 of its dtype).
// That is VPDPBUSD's grouping (a dword lane sums 4 byte products) with one scale FMA per lane and
// block, so the VNNI path, the AVX2/AVX-512 maddubs/madd paths and the portable integer loops give
// the same bits, independent of m, threads and batch position (batch invariance holds).
// Error bound against the double-precision dot of the dequantized operands,
// exact = sum_j w_j x_j with w_j = d[j / 32] q[j], x_j = xd[j / 32] xq[j]: a lane's term is
// float(s) * fl(d xd) (float(s) is exact, |s| <= 4 * 127^2), one rounding in the scale product,
// then at most ceil(k/64) fma roundings of the lane's partial sums, then the tree's 4 additions:
// |y - exact| <= (ceil(k/64) + 5) * u * sum_j |w_j x_j| (to first order; u = 2^-24; before the
// bias; no underflow). The magnitude is that of the elements' products (or of the 4-element
// lane sums), not sum_b |d xd s_b|: the lanes of one block can cancel (s_b = 0) while each still
// carries its rounding.
//
// Thread-safety: all functions are reentrant; `pool` may be null (then the caller's thread runs).
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "common/kernels/thread_pool.h"
#include "common/tensor/dtype.h"

namespace moe::kernels {

using common::DType;

// Activation numerics of the MatMul family (see BF16-ACTIVATION MODE above). kF32 is the default
// and the contract above; kBf16 is opt-in.
enum class Activations : uint8_t { kF32, kBf16 };

// "f32" / "bf16".
const char* ActivationsName(Activations a);

// dst[i] = bf16 of src[i] as the kBf16 mode rounds activations: denormal -> signed zero, then
// round-to-nearest-even; NaN -> quiet NaN. Integer operations only: identical on every path.
void RoundToBf16(const float* src, int64_t n, uint16_t* dst);

// A read-only view of a 2-D weight matrix W[rows, cols] (row-major, contiguous rows of
// common::RowBytes(dtype, cols) bytes).
struct WeightView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;  // n: output features
  int64_t cols = 0;  // k: input features
};

// y[m, n] = x[m, k] · W[n, k]^T (+ bias[n] if bias.data != null; bias is [1, n] or [n, 1]).
// REQUIRES: x has m*k floats, y has room for m*n floats, W.cols == k. y must not alias x.
// `act` selects the activation numerics (kBf16 changes results for bf16 weights only).
void MatMul(const float* x, int64_t m, const WeightView& w, float* y, ThreadPool* pool,
            const WeightView* bias = nullptr, Activations act = Activations::kF32);

// Quantizes rows [0, rows) of src[rows, cols] (dtype f32/bf16/f16, cols % 32 == 0) to q8_0 into
// dst (rows * RowBytes(kQ8_0, cols) bytes): per 32-block, amax = max |w| (f32), d = f16(amax / 127)
// rounded to nearest even, q = clamp(RNE(w / float(d)), -127, 127) (d == 0: q = 0; the clamp and
// the NaN rules are QuantizeActivationsQ8's: a NaN never counts in amax, a NaN quotient -> -127;
// a block with amax < ~7.8e-3 gets an f16-subnormal d, coarse, and clamps where w / d > 127).
// Scalar, identical everywhere; `pool` (may be null) splits the rows. Errors: InvalidArgument for
// another dtype or cols % 32 != 0.
absl::Status QuantizeRowsQ8_0(const void* src, DType dtype, int64_t rows, int64_t cols, void* dst,
                              ThreadPool* pool);

// The activation quantization of the q8_0 MatMul (INT8 WEIGHTS step 1), for tests and references:
// x[m, k] (k % 32 == 0) -> q[m, k] int8 and d[m, k / 32] f32. Per 32-block: amax = max |x| (a NaN
// element never counts: amax = |x| > amax ? |x| : amax from 0), d = amax / 127 (f32 division),
// q = clamp(RNE(x / d)) with the clamp max(v, -127) then min(v, 127) in x86's maxps/minps
// semantics (a NaN quotient becomes -127: an inf in the block makes d = inf, finite x -> 0, inf
// -> -127); d == 0: q = 0. Every ISA path's own copy (the one MatMul runs) gives these bits.
void QuantizeActivationsQ8(const float* x, int64_t m, int64_t k, int8_t* q, float* d);

// One MatMul of a MatMulMany batch: y[m, w.rows] = x[m, w.cols] · W^T (+ bias).
struct MatMulTask {
  const float* x = nullptr;
  int64_t m = 0;
  WeightView w;
  float* y = nullptr;
  const WeightView* bias = nullptr;  // optional, as MatMul's
  Activations activations = Activations::kF32;
};

// Independent MatMuls in one parallel region (one fork/join): their output columns are cut into
// chunks that the pool's threads take in turn, so a few small MatMuls (q/k/v, one layer's
// experts) cost one wake-up and stay balanced. Results are bitwise those of MatMul.
void MatMulMany(const MatMulTask* tasks, int64_t num_tasks, ThreadPool* pool);

// The first half of a SwiGLU block for several inputs in one parallel region:
// act[m, inter] = silu(x · gate^T) * (x · up^T), inter = gate.rows = up.rows, gate.cols = k.
// `up_scratch` has room for m * inter floats (clobbered). Bitwise equal to MatMul(gate),
// MatMul(up), SiluMul.
struct SwiGluTask {
  const float* x = nullptr;
  int64_t m = 0;
  WeightView gate;
  WeightView up;
  float* act = nullptr;
  float* up_scratch = nullptr;
  Activations activations = Activations::kF32;  // for both gate and up
};
void SwiGluMany(const SwiGluTask* tasks, int64_t num_tasks, ThreadPool* pool);

// out[m, d] = x / sqrt(mean(x^2) + eps) * weight[d] (HF RMSNorm; f32 variance). In-place allowed.
void RmsNorm(const float* x, int64_t m, int64_t d, const WeightView& weight, float eps, float* out);

// Rotary embedding in the HF rotate_half convention on x[m, num_heads, head_dim], in place.
// Row i uses positions[i]. inv_freq[j] = 1 / theta^(2j/rotary_dim) computed in f32 as HF does
// (HF builds inv_freq over the rotary part); only the first `rotary_dim` (<= head_dim, even)
// features rotate.
void ApplyRope(float* x, int64_t m, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
               const int32_t* positions, float theta);

// Numerically stable softmax over each row of x[m, n], in place.
void Softmax(float* x, int64_t m, int64_t n);

// x = silu(gate) * up, elementwise over n floats (the SwiGLU activation), written to `gate`.
void SiluMul(float* gate, const float* up, int64_t n);

// The routing of each row (token) to its top-k experts.
struct TopK {
  int32_t* expert_ids;  // [m, k]
  float* weights;       // [m, k] gate weights used to combine expert outputs
};
// Top-k gating from router logits[m, num_experts]: softmax over all experts (f32), take the k
// largest (ties: the lower expert id first), and renormalise them to sum 1 if `normalize`.
// Experts are returned in descending weight order.
void TopKGating(const float* logits, int64_t m, int64_t num_experts, int64_t k, bool normalize,
                TopK out);

// The paged KV layout, per layer: K and V are each [num_blocks, block_size, num_kv_heads,
// head_dim] f32. A sequence's token at position p lives in block block_table[p / block_size],
// slot p % block_size.
struct PagedKvLayout {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

// One query token of an attention batch.
struct AttentionToken {
  int32_t position;            // absolute position; attends keys 0..position of its sequence
  const int32_t* block_table;  // the sequence's block table (at least position/block_size + 1)
};

// Writes k[m, num_kv_heads, head_dim] and v (same shape) of each token into its slot.
void WriteKv(const float* k, const float* v, int64_t m, const AttentionToken* tokens,
             const PagedKvLayout& layout, float* k_cache, float* v_cache);

// Causal GQA attention: out[m, num_heads, head_dim] for queries q[m, num_heads, head_dim], reading
// keys/values 0..position of each token through its block table (K/V must already be written,
// this token's included). Query head h uses KV head h / (num_heads / num_kv_heads). Scores are
// scaled by `scale`, softmax is f32; keys are visited in increasing position order, so a token's
// output does not depend on batching or on how its prefill was chunked.
void PagedAttention(const float* q, int64_t m, int64_t num_heads, const AttentionToken* tokens,
                    const PagedKvLayout& layout, const float* k_cache, const float* v_cache,
                    float scale, float* out, ThreadPool* pool);

// Converts n elements of `src` (dtype) to f32 (embedding rows, norms). q8_0: `src` is one q8_0 row
// of n elements (n % 32 == 0), dequantized exactly (d * q).
void ConvertToF32(const void* src, DType dtype, int64_t n, float* dst);

// Which SIMD path the dispatcher picked on this machine: "avx512_bf16" (AVX-512 plus
// VDPBF16PS: the f32 kernels are avx512's, the kBf16 matmul is native), "avx512", "avx2" or
// "portable".
const char* ActiveIsa();

// Chooses the SIMD path of every later kernel call: "" or "auto" = the best this CPU supports (the
// default without a call), else "avx512_bf16", "avx512", "avx2" or "portable" (all bitwise
// identical; a forced path is for comparing speed and for testing the others). Mains pass the
// MOE_KERNELS_ISA environment variable here at start-up, before any kernel runs; core code never
// reads the environment. Errors (the choice is then unchanged): InvalidArgument for an unknown
// name, FailedPrecondition when this CPU cannot run the named path.
absl::Status SelectIsa(std::string_view isa);
// SelectIsa for a main: `env_value` is the MOE_KERNELS_ISA environment variable as getenv returns
// it (null: unset, auto). Errors: InvalidArgument naming the variable.
absl::Status SelectIsaFromEnvironment(const char* env_value);

}  // namespace moe::kernels
