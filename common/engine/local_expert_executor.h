// An ExpertExecutor that runs experts in this process with the CPU kernels: each expert's rows as
// one batch (gate and up MatMuls, SiluMul, down MatMul). Used by the embedded engine, `moe
// generate`, tests, and by the expert worker as its compute core.
#pragma once

#include <memory>

#include "common/engine/expert_executor.h"
#include "common/kernels/kernels.h"
#include "common/kernels/thread_pool.h"
#include "common/model/weights.h"

namespace moe::engine {

// The work runs inside Submit(), on the caller's thread and `pool`; Await() returns its result.
// All batches of a call share two parallel regions (kernels::SwiGluMany, then
// kernels::MatMulMany over the down projections). RunsConcurrently() is false.
//
// Thread-safety: the ExpertExecutor contract (one caller at a time), and more narrowly: the
// executor shares `pool` with its caller, so nothing else may run on that pool during Submit().
// Executors that share no pool may run in parallel (the expert worker gives each slot its own
// executor and pool). Outstanding calls: any number, awaited in any order.
//
// Lifetime: `weights` and `pool` are borrowed and must outlive the executor; the weights must not
// change during a Submit() (the expert worker holds its resident-set lock around it).
// `activations`: the numerics of the expert projections (kernels.h; kBf16 is the opt-in
// cluster-wide mode: every executor of a cluster must use the engine's setting).
class LocalExpertExecutor final : public ExpertExecutor {
 public:
  LocalExpertExecutor(const model::ModelWeights* weights, kernels::ThreadPool* pool,
                      kernels::Activations activations = kernels::Activations::kF32);
  ~LocalExpertExecutor() override;
  LocalExpertExecutor(const LocalExpertExecutor&) = delete;
  LocalExpertExecutor& operator=(const LocalExpertExecutor&) = delete;

  // ExpertExecutor
  // Errors: InvalidArgument (layer out of range, an expert not loaded in `weights`, hidden size
  // mismatch), returned by Await (Submit itself always succeeds).
  absl::StatusOr<ExpertCallHandle> Submit(const ExpertCall& call) override;
  absl::Status Await(ExpertCallHandle handle) override;

 private:
  struct Rep;  // the call scratch and the completed calls (local_expert_executor.cc)
  const std::unique_ptr<Rep> rep_;
};

}  // namespace moe::engine
