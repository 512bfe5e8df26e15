// An ExpertExecutor that runs one layer's experts on a CUDA device with the grouped expert FFN
// (common/kernels/cuda/cuda_kernels.h): every batch of a call in two launches (gate/up with the
// fused SiLU-multiply, then down), whatever the number of experts. The expert worker's GPU path
// and the embedded engine's (`compute: cuda`); the CPU LocalExpertExecutor stays the default.
//
// Numerics: the `gpu` setting (DESIGN.md §3): weights live on the device as bf16 (f32/f16
// checkpoints are rounded to bf16 on upload), activations enter the tensor cores as bf16,
// accumulation is f32. Rows are NOT the bits of LocalExpertExecutor (NMSE <= 1e-4 against it,
// cuda_kernels.h); they are batch-invariant on the device: a row's output never depends on the
// other rows or experts of its call.
//
// Thread-safety: the ExpertExecutor contract (one caller at a time). The work runs inside
// Submit() on the executor's stream, which Submit synchronises before returning; Await()
// returns its status. RunsConcurrently() is false.
//
// Lifetime: the experts present in `weights` at Create() are copied to the device; `weights`
// is not used after Create(). Destruction frees the device memory.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine/expert_executor.h"
#include "common/model/model_config.h"
#include "common/model/weights.h"

namespace moe::engine {

struct CudaExpertExecutorOptions {
  // Rows of one call the device scratch is first sized for (it grows on demand).
  int64_t initial_call_rows = 256;
  // InvalidArgument naming the field.
  absl::Status Validate() const;
};

class CudaExpertExecutor final : public ExpertExecutor {
 public:
  // Uploads every expert FFN present in `weights` (MoE layers of `config`). Errors:
  // FailedPrecondition (no CUDA device; the message says why), InvalidArgument (hidden or
  // moe_intermediate_size not a multiple of 16), ResourceExhausted (device memory).
  static absl::StatusOr<std::unique_ptr<CudaExpertExecutor>> Create(
      const model::ModelConfig& config, const model::ModelWeights& weights,
      const CudaExpertExecutorOptions& options = {});
  ~CudaExpertExecutor() override;
  CudaExpertExecutor(const CudaExpertExecutor&) = delete;
  CudaExpertExecutor& operator=(const CudaExpertExecutor&) = delete;

  // ExpertExecutor
  // Errors (returned by Await): InvalidArgument (layer out of range, an expert not uploaded,
  // hidden size mismatch), Internal (a CUDA error), ResourceExhausted (scratch growth).
  absl::StatusOr<ExpertCallHandle> Submit(const ExpertCall& call) override;
  absl::Status Await(ExpertCallHandle handle) override;

  // Device bytes held by the expert weights.
  int64_t weight_bytes() const;

 private:
  struct Rep;  // per-layer device weights, the stream and the call scratch (.cc)
  explicit CudaExpertExecutor(std::unique_ptr<Rep> rep);
  const std::unique_ptr<Rep> rep_;
};

}  // namespace moe::engine
