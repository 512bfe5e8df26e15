#include "common/engine/local_expert_executor.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe::engine {

absl::StatusOr<ExpertCallHandle> LocalExpertExecutor::Submit(const ExpertCall& call) {
  const ExpertCallHandle handle = next_handle_++;
  done_.emplace_back(handle, Run(call));
  return handle;
}

absl::Status LocalExpertExecutor::Await(ExpertCallHandle handle) {
  for (size_t i = 0; i < done_.size(); ++i) {
    if (done_[i].first == handle) {
      absl::Status s = std::move(done_[i].second);
      done_.erase(done_.begin() + static_cast<std::ptrdiff_t>(i));
      return s;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("expert call ", handle, " is unknown or already awaited"));
}

absl::Status LocalExpertExecutor::Run(const ExpertCall& call) {
  if (call.layer_idx < 0 || call.layer_idx >= static_cast<int32_t>(weights_->layers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert call: layer ", call.layer_idx, " out of range"));
  }
  const model::LayerWeights& layer = weights_->layers[call.layer_idx];
  int64_t max_rows = 0;
  for (const ExpertBatch& b : call.batches) {
    if (b.expert_id < 0 || b.expert_id >= static_cast<int32_t>(layer.experts.size()) ||
        !HasFfn(layer.experts[b.expert_id])) {
      return absl::InvalidArgumentError(absl::StrCat("expert call: expert ", b.expert_id,
                                                     " of layer ", call.layer_idx,
                                                     " is not loaded here"));
    }
    const model::ExpertWeights& w = layer.experts[b.expert_id];
    if (w.gate.cols != call.hidden || w.down.rows != call.hidden) {
      return absl::InvalidArgumentError(absl::StrCat("expert call: hidden size ", call.hidden,
                                                     " does not match expert ", b.expert_id));
    }
    max_rows = std::max(max_rows, b.num_tokens);
  }
  const int64_t n = static_cast<int64_t>(call.batches.size());
  const int threads = pool_ == nullptr ? 1 : pool_->num_threads();
  // Decode-sized batches: one expert per thread in a single parallel region, instead of three
  // pool-wide MatMuls per expert (each a fork/join). Rows are bit-exact either way (kernels.h).
  if (threads > 1 && n >= threads && max_rows <= kMaxRowsForExpertParallel) {
    if (static_cast<int64_t>(per_batch_scratch_.size()) < n) per_batch_scratch_.resize(n);
    pool_->ParallelFor(n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const ExpertBatch& b = call.batches[i];
        if (b.num_tokens <= 0) continue;
        RunSwiGlu(b.input, b.num_tokens, layer.experts[b.expert_id], &per_batch_scratch_[i],
                  b.output, nullptr);
      }
    });
    return absl::OkStatus();
  }
  for (const ExpertBatch& b : call.batches) {
    if (b.num_tokens <= 0) continue;
    RunSwiGlu(b.input, b.num_tokens, layer.experts[b.expert_id], &scratch_, b.output, pool_);
  }
  return absl::OkStatus();
}

}  // namespace moe::engine
