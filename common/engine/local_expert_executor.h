// An ExpertExecutor that runs experts in this process with the CPU kernels: each expert's rows as
// one batch (gate and up MatMuls, SiluMul, down MatMul). Used by the embedded engine, `moe
// generate`, tests, and by the expert worker as its compute core.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "common/engine/expert_executor.h"
#include "common/engine/ffn.h"
#include "common/kernels/thread_pool.h"
#include "common/model/weights.h"

namespace moe::engine {

// Thread-safety: one caller thread at a time (it shares the caller's ThreadPool).
// The work runs inside Submit(); Await() returns its result. All batches of a call share two
// parallel regions (kernels::SwiGluMany, then kernels::MatMulMany over the down projections).
// Lifetime: `weights` and `pool` are borrowed and must outlive the executor.
// `activations`: the numerics of the expert projections (kernels.h; kBf16 is the opt-in
// cluster-wide mode: every executor of a cluster must use the engine's setting).
class LocalExpertExecutor : public ExpertExecutor {
 public:
  LocalExpertExecutor(const model::ModelWeights* weights, kernels::ThreadPool* pool,
                      kernels::Activations activations = kernels::Activations::kF32)
      : weights_(weights), pool_(pool), activations_(activations) {}

  // ExpertExecutor
  absl::StatusOr<ExpertCallHandle> Submit(const ExpertCall& call) override;
  absl::Status Await(ExpertCallHandle handle) override;

 private:
  absl::Status Run(const ExpertCall& call);

  const model::ModelWeights* weights_;
  kernels::ThreadPool* pool_;
  const kernels::Activations activations_;
  FfnScratch scratch_;  // activations and up outputs of all batches of a call, back to back
  std::vector<kernels::SwiGluTask> swiglu_tasks_;
  std::vector<kernels::MatMulTask> down_tasks_;
  ExpertCallHandle next_handle_ = 1;
  // Completed calls not yet awaited (few at a time: a small vector beats a map).
  std::vector<std::pair<ExpertCallHandle, absl::Status>> done_;
};

}  // namespace moe::engine
