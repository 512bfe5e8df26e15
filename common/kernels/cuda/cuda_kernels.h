// CUDA kernels of the forward pass, behind a plain header: no CUDA header and no CUDA compiler is
// needed to include it (cudaStream_t is forward-declared exactly as cuda_runtime.h declares it).
// Built only when the build has nvcc (MOE_ENABLE_CUDA, cmake/MoeCuda.cmake): target
// moe_kernels_cuda, compile definition MOE_HAVE_CUDA=1 on its users.
//
// NUMERICS: the `gpu` setting (DESIGN.md §3), its own cluster-wide mode. Bit-equality with the
// CPU kernels (kernels.h) is not promised; each kernel is tested against kernels/reference/ under
// the tolerance stated at its declaration (cuda_kernels_test.cc).
//
// BATCH INVARIANCE holds on the device too: every output element is computed by one fixed
// sequence of operations on its own row's inputs. Concretely, no kernel here splits a reduction
// by the batch size (no split-K that depends on M), tile shapes are compile-time constants, the
// grouped FFN's rows are cut into fixed 16-row tiles whose k loop runs in increasing k with one
// accumulator per output element, attention visits keys in position order with one warp per
// (token, head), and reductions inside a block use a fixed tree over a fixed thread count. So a
// row's result does not depend on the rows it shares a launch with, its position among them, or
// how a prefill was chunked (bitwise tests, device only).
//
// All pointers below are DEVICE pointers unless the name says host_. Launchers enqueue work on
// `stream` (null = the legacy default stream) and return without synchronising; errors are the
// launch's (InvalidArgument for bad shapes, checked before anything is enqueued; Internal for a
// CUDA error). Thread-safety: reentrant; ordering is the stream's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct CUstream_st;  // cuda_runtime.h: typedef struct CUstream_st* cudaStream_t

namespace moe::kernels::cuda {

using Stream = CUstream_st*;

// Number of CUDA devices; 0 when there is none or no driver (cudaGetDeviceCount's error, e.g.
// "no CUDA-capable device is detected", is then in `why` if given). Never fails otherwise.
int DeviceCount(std::string* why = nullptr);

// "NVIDIA H200, sm_90, 139 GiB" for device 0, or the reason there is none.
std::string DeviceDescription();

// Owns one device allocation (cudaMalloc / cudaFree). Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  // Errors: ResourceExhausted (cudaMalloc failed, including "no device").
  static absl::StatusOr<DeviceBuffer> Allocate(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Synchronous copies (cudaMemcpy); Internal on a CUDA error.
absl::Status CopyToDevice(void* dst, const void* host_src, size_t bytes);
absl::Status CopyToHost(void* host_dst, const void* src, size_t bytes);
// Asynchronous on `stream` (host memory should be pinned for overlap; pageable works).
absl::Status CopyToDeviceAsync(void* dst, const void* host_src, size_t bytes, Stream stream);
absl::Status CopyToHostAsync(void* host_dst, const void* src, size_t bytes, Stream stream);
absl::Status Synchronize(Stream stream);

// An owned stream (cudaStreamCreateWithFlags non-blocking). Move-only.
class DeviceStream {
 public:
  static absl::StatusOr<DeviceStream> Create();
  DeviceStream() = default;
  ~DeviceStream();
  DeviceStream(DeviceStream&& other) noexcept;
  DeviceStream& operator=(DeviceStream&& other) noexcept;
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  Stream get() const { return stream_; }

 private:
  Stream stream_ = nullptr;
};

// ---- Grouped expert FFN (bf16 weights, tensor cores) -----------------------------------------
//
// All experts of one layer in one launch per projection stage: for every group g (one expert's
// rows x[offsets[g] .. offsets[g+1]), packed in group order)
//   act[r] = silu(x[r] · gate_g^T) * (x[r] · up_g^T)         (LaunchGroupedGateUp, fused)
//   y[r]   = act[r] · down_g^T                                 (LaunchGroupedDown)
// Weights are bf16 (Hugging Face layout, row-major [out, in]) in slot-major arrays:
//   gate, up: [num_slots, inter, hidden]; down: [num_slots, hidden, inter];
// group g uses slot group_slot[g]. Activations are rounded to bf16 on the way into the tensor
// cores (round-to-nearest-even), products accumulate in f32 in 16-row x 16-column tiles, k in
// increasing order, 16 at a time; SiLU and the multiply run in f32 on the accumulators.
// Tolerance against the f32 CPU oracle (double accumulation of the unrounded activations):
// NMSE <= 1e-4 per output (the two bf16 roundings, each <= 2^-9 relative).
// The gate weights of each token enter in LaunchCombine, which sums a token's top-k expert rows
// in its top-k order (fixed: the CPU engine's order).
struct GroupedFfnParams {
  int64_t hidden = 0;                   // multiple of 16
  int64_t inter = 0;                    // moe_intermediate_size, multiple of 16
  int32_t num_groups = 0;               // experts with rows in this launch
  int64_t total_rows = 0;               // offsets[num_groups]
  const int32_t* offsets = nullptr;     // [num_groups + 1] row offsets, non-decreasing, [0] = 0
  const int32_t* group_slot = nullptr;  // [num_groups] weight slot of each group
  const uint16_t* gate = nullptr;       // bf16 [num_slots, inter, hidden]
  const uint16_t* up = nullptr;         // bf16 [num_slots, inter, hidden]
  const uint16_t* down = nullptr;       // bf16 [num_slots, hidden, inter]
};
// act: [total_rows, inter] f32. Errors: InvalidArgument (sizes not multiples of 16, nulls).
absl::Status LaunchGroupedGateUp(const GroupedFfnParams& p, const float* x, float* act,
                                 Stream stream);
// y: [total_rows, hidden] f32.
absl::Status LaunchGroupedDown(const GroupedFfnParams& p, const float* act, float* y,
                               Stream stream);
// Both stages (the FFN of every row of every group). `act` is scratch of total_rows * inter.
absl::Status LaunchGroupedExpertFfn(const GroupedFfnParams& p, const float* x, float* act, float* y,
                                    Stream stream);

// out[t] = sum_{j < k} weights[t, j] * expert_rows[rows[t, j]], j in increasing order, f32.
// rows, weights: [m, k]; expert_rows: [*, hidden]; out: [m, hidden]. Tolerance: exact order of
// the CPU engine's combine, so bitwise equal to it when expert_rows are.
absl::Status LaunchCombine(const float* expert_rows, const int32_t* rows, const float* weights,
                           int64_t m, int64_t k, int64_t hidden, float* out, Stream stream);

// ---- Layer kernels (f32) -----------------------------------------------------------------------

// out[m, d] = x / sqrt(mean(x^2) + eps) * weight[d], one block per row, a fixed 256-thread tree.
// In place allowed. Tolerance: max |err| <= 1e-5 * max(1, |out|) against the reference.
absl::Status LaunchRmsNorm(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                           float* out, Stream stream);

// HF rotate_half RoPE on x[m, num_heads, head_dim] in place; row i at positions[i].
// `inv_freq` (device, [rotary_dim / 2]) is RopeInvFreq's, uploaded once per model: computed on
// the host exactly as kernels::ApplyRope does (f32 std::pow), so the f32 angle
// float(pos) * inv_freq[j] has the CPU's bits; only sincosf differs (CUDA's, <= 2 ulp).
// Tolerance: max |err| <= 2e-5 * (1 + |x|) for positions < 8192 against the reference.
absl::Status LaunchRope(float* x, int64_t m, int64_t num_heads, int64_t head_dim,
                        int64_t rotary_dim, const int32_t* positions, const float* inv_freq,
                        Stream stream);
// inv_freq[j] = 1 / theta^(2j / rotary_dim) in f32, j < rotary_dim / 2 (host).
std::vector<float> RopeInvFreq(float theta, int64_t rotary_dim);

// Top-k gating as kernels::TopKGating: f32 softmax over logits[m, num_experts], the k largest
// (ties: the lower expert id), renormalised if `normalize`, descending. num_experts <= 1024,
// k <= 32. Expert ids equal the reference's wherever the k-th and (k+1)-th probabilities differ
// by more than 1e-6; weights within 1e-6.
absl::Status LaunchTopKGating(const float* logits, int64_t m, int64_t num_experts, int64_t k,
                              bool normalize, int32_t* expert_ids, float* weights, Stream stream);

// The CPU block-table layout (kernels.h PagedKvLayout): K and V [num_blocks, block_size,
// num_kv_heads, head_dim] f32. Token t belongs to sequence seq_of_token[t], whose block table is
// row seq_of_token[t] of block_tables[num_seqs, max_blocks_per_seq].
struct PagedAttentionParams {
  int64_t num_blocks = 0;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;   // <= 256, multiple of 32
  int64_t num_heads = 0;  // multiple of num_kv_heads
  int64_t max_blocks_per_seq = 0;
  const int32_t* positions = nullptr;     // [m] absolute positions
  const int32_t* seq_of_token = nullptr;  // [m]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
};
// Writes k, v [m, num_kv_heads, head_dim] of each token into its slot.
absl::Status LaunchWriteKv(const PagedAttentionParams& p, const float* k, const float* v, int64_t m,
                           float* k_cache, float* v_cache, Stream stream);
// Causal GQA attention for decode and prefill tokens alike: out[m, num_heads, head_dim] over keys
// 0..position of each token's sequence, one warp per (token, head), keys in increasing position,
// online softmax in f32. Tolerance: max |err| <= 1e-5 against the double reference.
absl::Status LaunchPagedAttention(const PagedAttentionParams& p, const float* q, int64_t m,
                                  const float* k_cache, const float* v_cache, float scale,
                                  float* out, Stream stream);

}  // namespace moe::kernels::cuda
