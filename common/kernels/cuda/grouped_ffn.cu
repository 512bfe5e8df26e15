// The grouped expert FFN (bf16 weights on tensor cores) and the top-k combine.
//
// One template kernel serves both projection stages. A block computes a 16-row x 64-column tile
// of one group (four warps, 16 x 16 each) and walks k in increasing order, 32 at a time (two
// 16-wide MMA steps), so an output element is one accumulator fed by its own row and column in a
// fixed order: the tile's other rows, the group's size and the launch's other groups never enter
// its value (batch invariance; no split-K).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

#include "common/kernels/cuda/cuda_kernels.h"
#include "common/kernels/cuda/cuda_status.h"

namespace moe::kernels::cuda {
namespace {

using namespace nvcuda;  // NOLINT: wmma's fragment names

constexpr int kTileM = 16;
constexpr int kTileN = 64;  // four warps of 16 columns
constexpr int kTileK = 32;
constexpr int kWarps = kTileN / 16;
constexpr int kLdA = kTileK + 8;  // bf16 elements per smem row (16-byte multiple, fewer conflicts)

// Finds the group and first row of m-tile `t`; false past the last tile.
__device__ bool LocateTile(const int32_t* offsets, int32_t num_groups, int64_t t, int32_t* group,
                           int64_t* row0, int32_t* num_rows) {
  for (int32_t g = 0; g < num_groups; ++g) {
    const int64_t rows = offsets[g + 1] - offsets[g];
    const int64_t tiles = (rows + kTileM - 1) / kTileM;
    if (t < tiles) {
      *group = g;
      *row0 = offsets[g] + t * kTileM;
      *num_rows = static_cast<int32_t>(rows - t * kTileM < kTileM ? rows - t * kTileM : kTileM);
      return true;
    }
    t -= tiles;
  }
  return false;
}

// kGateUp: out[r, n] = silu(x·gate^T) * (x·up^T), n < inter, k = hidden.
// else:    out[r, n] = x·down^T, n < hidden, k = inter.
template <bool kGateUp>
__global__ void __launch_bounds__(kWarps * 32)
    GroupedFfnKernel(const int32_t* offsets, const int32_t* group_slot, int32_t num_groups,
                     int64_t k_dim, int64_t n_dim, const float* x, const __nv_bfloat16* w0,
                     const __nv_bfloat16* w1, float* out) {
  int32_t group = 0, num_rows = 0;
  int64_t row0 = 0;
  if (!LocateTile(offsets, num_groups, blockIdx.x, &group, &row0, &num_rows)) return;

  __shared__ __align__(32) __nv_bfloat16 a_tile[kTileM * kLdA];
  __shared__ __align__(32) float c_tile[kGateUp ? 2 : 1][kWarps][16 * 16];

  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTileN + warp * 16;
  const bool warp_active = n0 < n_dim;
  const int64_t slot_elems = n_dim * k_dim;
  const __nv_bfloat16* b0 = w0 + group_slot[group] * slot_elems + n0 * k_dim;
  const __nv_bfloat16* b1 = kGateUp ? w1 + group_slot[group] * slot_elems + n0 * k_dim : nullptr;

  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc0, acc1;
  wmma::fill_fragment(acc0, 0.0f);
  wmma::fill_fragment(acc1, 0.0f);
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a_frag;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b_frag;

  for (int64_t k0 = 0; k0 < k_dim; k0 += kTileK) {
    // Rows past the group's end and k past k_dim load zeros (they feed no stored output).
    for (int i = threadIdx.x; i < kTileM * kTileK; i += kWarps * 32) {
      const int r = i / kTileK, c = i % kTileK;
      const float v = (r < num_rows && k0 + c < k_dim) ? x[(row0 + r) * k_dim + k0 + c] : 0.0f;
      a_tile[r * kLdA + c] = __float2bfloat16_rn(v);
    }
    __syncthreads();
    if (warp_active) {
      for (int kk = 0; kk < kTileK && k0 + kk < k_dim; kk += 16) {
        wmma::load_matrix_sync(a_frag, a_tile + kk, kLdA);
        // B[k][n] = W[n][k]: W's rows are B's columns (col-major, leading dimension k_dim).
        wmma::load_matrix_sync(b_frag, b0 + k0 + kk, static_cast<unsigned>(k_dim));
        wmma::mma_sync(acc0, a_frag, b_frag, acc0);
        if constexpr (kGateUp) {
          wmma::load_matrix_sync(b_frag, b1 + k0 + kk, static_cast<unsigned>(k_dim));
          wmma::mma_sync(acc1, a_frag, b_frag, acc1);
        }
      }
    }
    __syncthreads();
  }
  if (!warp_active) return;
  wmma::store_matrix_sync(c_tile[0][warp], acc0, 16, wmma::mem_row_major);
  if constexpr (kGateUp)
    wmma::store_matrix_sync(c_tile[kGateUp ? 1 : 0][warp], acc1, 16, wmma::mem_row_major);
  __syncwarp();
  for (int i = lane; i < 16 * 16; i += 32) {
    const int r = i / 16, c = i % 16;
    if (r >= num_rows) continue;
    float v = c_tile[0][warp][i];
    if constexpr (kGateUp) {
      const float u = c_tile[kGateUp ? 1 : 0][warp][i];
      v = __fmul_rn(__fdiv_rn(v, __fadd_rn(1.0f, expf(-v))), u);
    }
    out[(row0 + r) * n_dim + n0 + c] = v;
  }
}

__global__ void CombineKernel(const float* expert_rows, const int32_t* rows, const float* weights,
                              int64_t m, int64_t k, int64_t hidden, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * hidden) return;
  const int64_t t = i / hidden, d = i % hidden;
  // The CPU engine's order and roundings (no contraction): acc = w0*o0, then acc += wj*oj.
  float acc =
      __fmul_rn(weights[t * k], expert_rows[static_cast<int64_t>(rows[t * k]) * hidden + d]);
  for (int64_t j = 1; j < k; ++j) {
    acc =
        __fadd_rn(acc, __fmul_rn(weights[t * k + j],
                                 expert_rows[static_cast<int64_t>(rows[t * k + j]) * hidden + d]));
  }
  out[i] = acc;
}

absl::Status CheckParams(const GroupedFfnParams& p) {
  if (p.hidden <= 0 || p.inter <= 0 || p.hidden % 16 != 0 || p.inter % 16 != 0) {
    return absl::InvalidArgumentError(
        "grouped FFN: hidden and inter must be positive multiples of 16");
  }
  if (p.num_groups < 0 || p.total_rows < 0) {
    return absl::InvalidArgumentError("grouped FFN: negative group or row count");
  }
  if (p.num_groups > 0 && (p.offsets == nullptr || p.group_slot == nullptr || p.gate == nullptr ||
                           p.up == nullptr || p.down == nullptr)) {
    return absl::InvalidArgumentError("grouped FFN: null offsets, slots or weights");
  }
  return absl::OkStatus();
}

// Upper bound of the m-tiles of a launch: every group may waste one partial tile.
unsigned TileBound(const GroupedFfnParams& p) {
  return static_cast<unsigned>((p.total_rows + kTileM - 1) / kTileM + p.num_groups);
}

}  // namespace

absl::Status LaunchGroupedGateUp(const GroupedFfnParams& p, const float* x, float* act,
                                 Stream stream) {
  if (absl::Status s = CheckParams(p); !s.ok()) return s;
  if (p.total_rows == 0 || p.num_groups == 0) return absl::OkStatus();
  const dim3 grid(TileBound(p), static_cast<unsigned>((p.inter + kTileN - 1) / kTileN));
  GroupedFfnKernel<true>
      <<<grid, kWarps * 32, 0, stream>>>(p.offsets, p.group_slot, p.num_groups, p.hidden, p.inter,
                                         x, reinterpret_cast<const __nv_bfloat16*>(p.gate),
                                         reinterpret_cast<const __nv_bfloat16*>(p.up), act);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchGroupedDown(const GroupedFfnParams& p, const float* act, float* y,
                               Stream stream) {
  if (absl::Status s = CheckParams(p); !s.ok()) return s;
  if (p.total_rows == 0 || p.num_groups == 0) return absl::OkStatus();
  const dim3 grid(TileBound(p), static_cast<unsigned>((p.hidden + kTileN - 1) / kTileN));
  GroupedFfnKernel<false><<<grid, kWarps * 32, 0, stream>>>(
      p.offsets, p.group_slot, p.num_groups, p.inter, p.hidden, act,
      reinterpret_cast<const __nv_bfloat16*>(p.down), nullptr, y);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchGroupedExpertFfn(const GroupedFfnParams& p, const float* x, float* act, float* y,
                                    Stream stream) {
  if (absl::Status s = LaunchGroupedGateUp(p, x, act, stream); !s.ok()) return s;
  return LaunchGroupedDown(p, act, y, stream);
}

absl::Status LaunchCombine(const float* expert_rows, const int32_t* rows, const float* weights,
                           int64_t m, int64_t k, int64_t hidden, float* out, Stream stream) {
  if (m < 0 || k <= 0 || hidden <= 0) {
    return absl::InvalidArgumentError("combine: need m >= 0, k > 0, hidden > 0");
  }
  if (m == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t n = m * hidden;
  CombineKernel<<<static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
      expert_rows, rows, weights, m, k, hidden, out);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace moe::kernels::cuda
