// Slow, obviously-correct reference implementations of every kernel in common/kernels/kernels.h.
// Plain loops, double accumulation; no threads, no SIMD. Tests compare the fast kernels with these
// under a stated tolerance; nothing on a hot path calls them.
#pragma once

#include <cstdint>

#include "common/kernels/kernels.h"

namespace moe::kernels::reference {

// Element i (row-major, i = row * cols + col) of a weight view as f32 (exact conversion; q8_0:
// d[col / 32] * q[col] of its row).
float WeightAt(const WeightView& w, int64_t i);

// y[m, n] = x[m, k] · W[n, k]^T (+ bias), accumulated in double. q8_0 weights: x is first
// quantized by QuantizeActivationsQ8 and the dequantized x (xd * xq, exact in f32) is used.
void MatMul(const float* x, int64_t m, const WeightView& w, float* y,
            const WeightView* bias = nullptr);

void RmsNorm(const float* x, int64_t m, int64_t d, const WeightView& weight, float eps, float* out);

// HF rotate_half with inv_freq[j] = 1 / theta^(2j/rotary_dim) computed in f32 (as HF does) and
// angle = float(pos) * inv_freq[j]; cos/sin evaluated in double.
void ApplyRope(float* x, int64_t m, int64_t num_heads, int64_t head_dim, int64_t rotary_dim,
               const int32_t* positions, float theta);

void Softmax(float* x, int64_t m, int64_t n);

void SiluMul(float* gate, const float* up, int64_t n);

void TopKGating(const float* logits, int64_t m, int64_t num_experts, int64_t k, bool normalize,
                TopK out);

void WriteKv(const float* k, const float* v, int64_t m, const AttentionToken* tokens,
             const PagedKvLayout& layout, float* k_cache, float* v_cache);

// Gathers each token's keys/values into dense arrays and runs a two-pass softmax in double.
void PagedAttention(const float* q, int64_t m, int64_t num_heads, const AttentionToken* tokens,
                    const PagedKvLayout& layout, const float* k_cache, const float* v_cache,
                    float scale, float* out);

// q8_0: `src` is one row of n elements (n % 32 == 0).
void ConvertToF32(const void* src, DType dtype, int64_t n, float* dst);

}  // namespace moe::kernels::reference
