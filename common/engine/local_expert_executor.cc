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
  }
  // All experts of the call in two parallel regions (gate/up/activation, then down), their
  // columns cut into chunks the pool's threads take in turn: balanced whatever the batch sizes,
  // two fork/joins per layer. Rows are bit-exact either way (kernels.h).
  swiglu_tasks_.clear();
  down_tasks_.clear();
  int64_t need = 0;
  for (const ExpertBatch& b : call.batches) {
    if (b.num_tokens > 0) need += b.num_tokens * layer.experts[b.expert_id].gate.rows;
  }
  if (static_cast<int64_t>(scratch_.gate.size()) < need) {
    scratch_.gate.resize(static_cast<size_t>(need));
    scratch_.up.resize(static_cast<size_t>(need));
  }
  int64_t offset = 0;
  for (const ExpertBatch& b : call.batches) {
    if (b.num_tokens <= 0) continue;
    const model::ExpertWeights& w = layer.experts[b.expert_id];
    float* act = scratch_.gate.data() + offset;
    swiglu_tasks_.push_back(
        {b.input, b.num_tokens, w.gate, w.up, act, scratch_.up.data() + offset, activations_});
    down_tasks_.push_back({act, b.num_tokens, w.down, b.output, nullptr, activations_});
    offset += b.num_tokens * w.gate.rows;
  }
  kernels::SwiGluMany(swiglu_tasks_.data(), static_cast<int64_t>(swiglu_tasks_.size()), pool_);
  kernels::MatMulMany(down_tasks_.data(), static_cast<int64_t>(down_tasks_.size()), pool_);
  return absl::OkStatus();
}

}  // namespace moe::engine
