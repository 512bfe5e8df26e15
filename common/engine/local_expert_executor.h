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
// The work runs inside Submit(); Await() returns its result. Small (decode) batches run one
// expert per pool thread; larger ones split each MatMul over the pool. Lifetime: `weights` and
// `pool` are borrowed and must outlive the executor.
class LocalExpertExecutor : public ExpertExecutor {
 public:
  LocalExpertExecutor(const model::ModelWeights* weights, kernels::ThreadPool* pool)
      : weights_(weights), pool_(pool) {}

  // ExpertExecutor
  absl::StatusOr<ExpertCallHandle> Submit(const ExpertCall& call) override;
  absl::Status Await(ExpertCallHandle handle) override;

 private:
  absl::Status Run(const ExpertCall& call);

  // Largest expert batch for which experts run one per thread (decode); above it each expert's
  // MatMuls use the whole pool.
  static constexpr int64_t kMaxRowsForExpertParallel = 8;

  const model::ModelWeights* weights_;
  kernels::ThreadPool* pool_;
  FfnScratch scratch_;
  std::vector<FfnScratch> per_batch_scratch_;  // one per batch in expert-parallel mode
  ExpertCallHandle next_handle_ = 1;
  // Completed calls not yet awaited (few at a time: a small vector beats a map).
  std::vector<std::pair<ExpertCallHandle, absl::Status>> done_;
};

}  // namespace moe::engine
