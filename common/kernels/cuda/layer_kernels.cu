// RMSNorm, RoPE, top-k gating and paged attention (f32). Each output element is computed by one
// thread, warp or block whose shape is a compile-time constant and whose reduction order is
// fixed, so a row's result never depends on the other rows of the launch (cuda_kernels.h).
#include <cuda_runtime.h>

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "common/kernels/cuda/cuda_kernels.h"
#include "common/kernels/cuda/cuda_status.h"

namespace moe::kernels::cuda {
namespace {

constexpr int kNormThreads = 256;

__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const float* x, int64_t d, const float* weight, float eps, float* out) {
  __shared__ float partial[kNormThreads];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * d;
  float* o = out + static_cast<int64_t>(blockIdx.x) * d;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += kNormThreads) acc = fmaf(xr[j], xr[j], acc);
  partial[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kNormThreads / 2; s > 0; s /= 2) {  // the fixed tree: (0+s, 1+s+1, ...)
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  const float r = 1.0f / sqrtf(partial[0] / static_cast<float>(d) + eps);
  // Every thread has read partial[0] before any writes `o` (in place: o may alias x).
  for (int64_t j = threadIdx.x; j < d; j += kNormThreads)
    o[j] = __fmul_rn(__fmul_rn(xr[j], r), weight[j]);
}

__global__ void RopeKernel(float* x, int64_t m, int64_t num_heads, int64_t head_dim,
                           int64_t rotary_dim, const int32_t* positions, const float* inv_freq) {
  const int64_t half = rotary_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * num_heads * half) return;
  const int64_t j = i % half;
  const int64_t head = (i / half) % num_heads;
  const int64_t row = i / (half * num_heads);
  // The CPU's f32 angle, bit for bit (RopeInvFreq is computed as kernels::ApplyRope does).
  const float angle = __fmul_rn(static_cast<float>(positions[row]), inv_freq[j]);
  float s, c;
  sincosf(angle, &s, &c);
  float* v = x + (row * num_heads + head) * head_dim;
  const float x1 = v[j], x2 = v[j + half];
  v[j] = __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
  v[j + half] = __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

constexpr int kMaxTopK = 32;

__global__ void TopKKernel(const float* logits, int64_t m, int64_t num_experts, int64_t k,
                           bool normalize, int32_t* expert_ids, float* weights) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (row >= m) return;
  const float* l = logits + row * num_experts;
  float mx = -FLT_MAX;
  for (int64_t e = 0; e < num_experts; ++e) mx = fmaxf(mx, l[e]);
  float sum = 0.0f;
  for (int64_t e = 0; e < num_experts; ++e) sum += expf(l[e] - mx);
  int32_t chosen[kMaxTopK];
  float prob[kMaxTopK];
  float total = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    float best_logit = 0.0f;
    for (int64_t e = 0; e < num_experts; ++e) {
      bool taken = false;
      for (int64_t q = 0; q < j; ++q) taken |= chosen[q] == e;
      // Strictly greater: among equal logits the lower expert id wins (ascending scan).
      if (!taken && (best < 0 || l[e] > best_logit)) {
        best = static_cast<int32_t>(e);
        best_logit = l[e];
      }
    }
    chosen[j] = best;
    prob[j] = expf(best_logit - mx) / sum;
    total += prob[j];
  }
  for (int64_t j = 0; j < k; ++j) {
    expert_ids[row * k + j] = chosen[j];
    weights[row * k + j] = normalize ? prob[j] / total : prob[j];
  }
}

__global__ void WriteKvKernel(PagedAttentionParams p, const float* k, const float* v, int64_t m,
                              float* k_cache, float* v_cache) {
  const int64_t per_token = p.num_kv_heads * p.head_dim;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * per_token) return;
  const int64_t t = i / per_token, e = i % per_token;
  const int32_t pos = p.positions[t];
  const int32_t block =
      p.block_tables[static_cast<int64_t>(p.seq_of_token[t]) * p.max_blocks_per_seq +
                     pos / p.block_size];
  const int64_t dst =
      (static_cast<int64_t>(block) * p.block_size + pos % p.block_size) * per_token + e;
  k_cache[dst] = k[i];
  v_cache[dst] = v[i];
}

constexpr int kAttnWarps = 4;
constexpr int kMaxHeadDimPerLane = 8;  // head_dim <= 256

__global__ void __launch_bounds__(kAttnWarps * 32)
    PagedAttentionKernel(PagedAttentionParams p, const float* q, int64_t m, const float* k_cache,
                         const float* v_cache, float scale, float* out) {
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kAttnWarps + threadIdx.x / 32;
  if (pair >= m * p.num_heads) return;  // whole warps exit together
  const int lane = threadIdx.x % 32;
  const int64_t t = pair / p.num_heads, h = pair % p.num_heads;
  const int64_t kvh = h / (p.num_heads / p.num_kv_heads);
  const int per_lane = static_cast<int>(p.head_dim / 32);
  const float* qv = q + (t * p.num_heads + h) * p.head_dim;
  float qr[kMaxHeadDimPerLane], acc[kMaxHeadDimPerLane];
  for (int i = 0; i < per_lane; ++i) {
    qr[i] = qv[lane + 32 * i];
    acc[i] = 0.0f;
  }
  const int32_t* table =
      p.block_tables + static_cast<int64_t>(p.seq_of_token[t]) * p.max_blocks_per_seq;
  const int32_t pos = p.positions[t];
  float running_max = -INFINITY, denom = 0.0f;
  for (int32_t key = 0; key <= pos; ++key) {
    const int64_t base =
        ((static_cast<int64_t>(table[key / p.block_size]) * p.block_size + key % p.block_size) *
             p.num_kv_heads +
         kvh) *
        p.head_dim;
    float dot = 0.0f;
    for (int i = 0; i < per_lane; ++i) dot = fmaf(qr[i], k_cache[base + lane + 32 * i], dot);
    for (int off = 16; off > 0; off /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    const float s = dot * scale;
    const float new_max = fmaxf(running_max, s);
    const float correction = expf(running_max - new_max);
    const float w = expf(s - new_max);
    denom = fmaf(denom, correction, w);
    for (int i = 0; i < per_lane; ++i) {
      acc[i] = fmaf(acc[i], correction, w * v_cache[base + lane + 32 * i]);
    }
    running_max = new_max;
  }
  float* o = out + (t * p.num_heads + h) * p.head_dim;
  for (int i = 0; i < per_lane; ++i) o[lane + 32 * i] = acc[i] / denom;
}

unsigned Blocks(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

absl::Status CheckAttention(const PagedAttentionParams& p) {
  if (p.head_dim <= 0 || p.head_dim % 32 != 0 || p.head_dim > 32 * kMaxHeadDimPerLane) {
    return absl::InvalidArgumentError("paged attention: head_dim must be a multiple of 32, <= 256");
  }
  if (p.num_kv_heads <= 0 || p.num_heads <= 0 || p.num_heads % p.num_kv_heads != 0) {
    return absl::InvalidArgumentError(
        "paged attention: num_heads must be a multiple of num_kv_heads");
  }
  if (p.block_size <= 0 || p.max_blocks_per_seq <= 0) {
    return absl::InvalidArgumentError("paged attention: block_size and max_blocks_per_seq > 0");
  }
  if (p.positions == nullptr || p.seq_of_token == nullptr || p.block_tables == nullptr) {
    return absl::InvalidArgumentError("paged attention: null positions or block tables");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LaunchRmsNorm(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                           float* out, Stream stream) {
  if (m < 0 || d <= 0) return absl::InvalidArgumentError("rms norm: need m >= 0, d > 0");
  if (m == 0) return absl::OkStatus();
  RmsNormKernel<<<static_cast<unsigned>(m), kNormThreads, 0, stream>>>(x, d, weight, eps, out);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

std::vector<float> RopeInvFreq(float theta, int64_t rotary_dim) {
  std::vector<float> inv_freq(rotary_dim > 0 ? rotary_dim / 2 : 0);
  for (size_t j = 0; j < inv_freq.size(); ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(rotary_dim);
    inv_freq[j] = 1.0f / std::pow(theta, exponent);
  }
  return inv_freq;
}

absl::Status LaunchRope(float* x, int64_t m, int64_t num_heads, int64_t head_dim,
                        int64_t rotary_dim, const int32_t* positions, const float* inv_freq,
                        Stream stream) {
  if (m < 0 || num_heads <= 0 || rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim) {
    return absl::InvalidArgumentError("rope: need an even rotary_dim in (0, head_dim]");
  }
  const int64_t n = m * num_heads * (rotary_dim / 2);
  if (n == 0) return absl::OkStatus();
  RopeKernel<<<Blocks(n, 256), 256, 0, stream>>>(x, m, num_heads, head_dim, rotary_dim, positions,
                                                 inv_freq);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchTopKGating(const float* logits, int64_t m, int64_t num_experts, int64_t k,
                              bool normalize, int32_t* expert_ids, float* weights, Stream stream) {
  if (num_experts <= 0 || num_experts > 1024 || k <= 0 || k > kMaxTopK || k > num_experts) {
    return absl::InvalidArgumentError("top-k gating: need 0 < k <= min(32, num_experts <= 1024)");
  }
  if (m <= 0) return m == 0 ? absl::OkStatus() : absl::InvalidArgumentError("top-k: m < 0");
  TopKKernel<<<Blocks(m, 128), 128, 0, stream>>>(logits, m, num_experts, k, normalize, expert_ids,
                                                 weights);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchWriteKv(const PagedAttentionParams& p, const float* k, const float* v, int64_t m,
                           float* k_cache, float* v_cache, Stream stream) {
  if (absl::Status s = CheckAttention(p); !s.ok()) return s;
  const int64_t n = m * p.num_kv_heads * p.head_dim;
  if (n <= 0) return absl::OkStatus();
  WriteKvKernel<<<Blocks(n, 256), 256, 0, stream>>>(p, k, v, m, k_cache, v_cache);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchPagedAttention(const PagedAttentionParams& p, const float* q, int64_t m,
                                  const float* k_cache, const float* v_cache, float scale,
                                  float* out, Stream stream) {
  if (absl::Status s = CheckAttention(p); !s.ok()) return s;
  if (m <= 0) return absl::OkStatus();
  const int64_t pairs = m * p.num_heads;
  PagedAttentionKernel<<<Blocks(pairs, kAttnWarps), kAttnWarps * 32, 0, stream>>>(
      p, q, m, k_cache, v_cache, scale, out);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace moe::kernels::cuda
