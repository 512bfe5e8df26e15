#include "common/engine/local_expert_executor.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/ffn.h"

namespace moe::engine {

// Constant after construction: weights, pool, activations. The rest is reused by every call.
struct LocalExpertExecutor::Rep {
  Rep(const model::ModelWeights* weights, kernels::ThreadPool* pool,
      kernels::Activations activations)
      : weights(weights), pool(pool), activations(activations) {}

  absl::Status Run(const ExpertCall& call);

  const model::ModelWeights* const weights;
  kernels::ThreadPool* const pool;
  const kernels::Activations activations;
  FfnScratch scratch;  // activations and up outputs of all batches of a call, back to back
  std::vector<kernels::SwiGluTask> swiglu_tasks;
  std::vector<kernels::MatMulTask> down_tasks;
  ExpertCallHandle next_handle = 1;
  // Completed calls not yet awaited (few at a time: a small vector beats a map).
  std::vector<std::pair<ExpertCallHandle, absl::Status>> done;
};

LocalExpertExecutor::LocalExpertExecutor(const model::ModelWeights* weights,
                                         kernels::ThreadPool* pool,
                                         kernels::Activations activations)
    : rep_(std::make_unique<Rep>(weights, pool, activations)) {}

LocalExpertExecutor::~LocalExpertExecutor() = default;

absl::StatusOr<ExpertCallHandle> LocalExpertExecutor::Submit(const ExpertCall& call) {
  const ExpertCallHandle handle = rep_->next_handle++;
  rep_->done.emplace_back(handle, rep_->Run(call));
  return handle;
}

absl::Status LocalExpertExecutor::Await(ExpertCallHandle handle) {
  std::vector<std::pair<ExpertCallHandle, absl::Status>>& done = rep_->done;
  for (size_t i = 0; i < done.size(); ++i) {
    if (done[i].first == handle) {
      absl::Status s = std::move(done[i].second);
      done.erase(done.begin() + static_cast<std::ptrdiff_t>(i));
      return s;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("expert call ", handle, " is unknown or already awaited"));
}

absl::Status LocalExpertExecutor::Rep::Run(const ExpertCall& call) {
  if (call.layer_idx < 0 || call.layer_idx >= static_cast<int32_t>(weights->layers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert call: layer ", call.layer_idx, " out of range"));
  }
  const model::LayerWeights& layer = weights->layers[call.layer_idx];
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
  swiglu_tasks.clear();
  down_tasks.clear();
  int64_t need = 0;
  for (const ExpertBatch& b : call.batches) {
    if (b.num_tokens > 0) need += b.num_tokens * layer.experts[b.expert_id].gate.rows;
  }
  if (static_cast<int64_t>(scratch.gate.size()) < need) {
    scratch.gate.resize(static_cast<size_t>(need));
    scratch.up.resize(static_cast<size_t>(need));
  }
  int64_t offset = 0;
  for (const ExpertBatch& b : call.batches) {
    if (b.num_tokens <= 0) continue;
    const model::ExpertWeights& w = layer.experts[b.expert_id];
    float* act = scratch.gate.data() + offset;
    swiglu_tasks.push_back(
        {b.input, b.num_tokens, w.gate, w.up, act, scratch.up.data() + offset, activations});
    down_tasks.push_back({act, b.num_tokens, w.down, b.output, nullptr, activations});
    offset += b.num_tokens * w.gate.rows;
  }
  kernels::SwiGluMany(swiglu_tasks.data(), static_cast<int64_t>(swiglu_tasks.size()), pool);
  kernels::MatMulMany(down_tasks.data(), static_cast<int64_t>(down_tasks.size()), pool);
  return absl::OkStatus();
}

}  // namespace moe::engine
