#include "common/engine/cuda/cuda_expert_executor.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/ffn.h"
#include "common/kernels/cuda/cuda_kernels.h"
#include "common/kernels/kernels.h"
#include "common/tensor/dtype.h"

namespace moe::engine {

namespace cu = kernels::cuda;

absl::Status CudaExpertExecutorOptions::Validate() const {
  if (initial_call_rows < 1) {
    return absl::InvalidArgumentError("initial_call_rows must be >= 1");
  }
  return absl::OkStatus();
}

namespace {

// One layer's experts on the device, slot-major (cuda_kernels.h GroupedFfnParams).
struct DeviceLayer {
  std::vector<int32_t> slot_of_expert;  // [num_experts], -1 = not uploaded
  cu::DeviceBuffer gate, up, down;
};

// Appends `w` as bf16 to `out` (exact for bf16 checkpoints, rounded for f32/f16).
void AppendBf16(const kernels::WeightView& w, std::vector<uint16_t>* out) {
  const int64_t n = w.rows * w.cols;
  const size_t at = out->size();
  out->resize(at + n);
  if (w.dtype == common::DType::kBF16) {
    std::memcpy(out->data() + at, w.data, n * sizeof(uint16_t));
    return;
  }
  std::vector<float> f(n);
  kernels::ConvertToF32(w.data, w.dtype, n, f.data());
  for (int64_t i = 0; i < n; ++i) (*out)[at + i] = common::F32ToBf16(f[i]);
}

absl::StatusOr<cu::DeviceBuffer> UploadVector(const std::vector<uint16_t>& host) {
  ASSIGN_OR_RETURN(cu::DeviceBuffer b, cu::DeviceBuffer::Allocate(host.size() * sizeof(uint16_t)));
  RETURN_IF_ERROR(cu::CopyToDevice(b.data(), host.data(), host.size() * sizeof(uint16_t)));
  return b;
}

// Grows `b` to at least `bytes` (contents not kept).
absl::Status Reserve(cu::DeviceBuffer* b, size_t bytes) {
  if (b->bytes() >= bytes) return absl::OkStatus();
  ASSIGN_OR_RETURN(*b, cu::DeviceBuffer::Allocate(bytes));
  return absl::OkStatus();
}

}  // namespace

struct CudaExpertExecutor::Rep {
  int64_t hidden = 0;
  int64_t inter = 0;
  int64_t weight_bytes = 0;
  std::vector<DeviceLayer> layers;  // [num_layers]; dense layers have no slots
  cu::DeviceStream stream;
  // Call scratch, grown to the largest call seen.
  cu::DeviceBuffer x, act, y, offsets, slots;
  std::vector<int32_t> host_offsets, host_slots;
  ExpertCallHandle next_handle = 1;
  std::vector<std::pair<ExpertCallHandle, absl::Status>> done;

  absl::Status Run(const ExpertCall& call);
};

absl::StatusOr<std::unique_ptr<CudaExpertExecutor>> CudaExpertExecutor::Create(
    const model::ModelConfig& config, const model::ModelWeights& weights,
    const CudaExpertExecutorOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  std::string why;
  if (cu::DeviceCount(&why) == 0) {
    return absl::FailedPreconditionError(absl::StrCat("compute cuda: no CUDA device (", why, ")"));
  }
  auto rep = std::make_unique<Rep>();
  rep->hidden = config.hidden_size;
  rep->inter = config.moe_intermediate_size;
  if (rep->hidden % 16 != 0 || rep->inter % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("compute cuda: hidden_size (", rep->hidden,
                                                   ") and moe_intermediate_size (", rep->inter,
                                                   ") must be multiples of 16"));
  }
  ASSIGN_OR_RETURN(rep->stream, cu::DeviceStream::Create());
  rep->layers.resize(weights.layers.size());
  for (size_t l = 0; l < weights.layers.size(); ++l) {
    const model::LayerWeights& lw = weights.layers[l];
    DeviceLayer& dl = rep->layers[l];
    dl.slot_of_expert.assign(lw.experts.size(), -1);
    std::vector<uint16_t> gate, up, down;
    int32_t slots = 0;
    for (size_t e = 0; e < lw.experts.size(); ++e) {
      const model::ExpertWeights& w = lw.experts[e];
      if (!HasFfn(w)) continue;
      if (w.gate.rows != rep->inter || w.gate.cols != rep->hidden || w.down.rows != rep->hidden) {
        return absl::InvalidArgumentError(
            absl::StrCat("compute cuda: expert ", e, " of layer ", l, " has unexpected shapes"));
      }
      AppendBf16(w.gate, &gate);
      AppendBf16(w.up, &up);
      AppendBf16(w.down, &down);
      dl.slot_of_expert[e] = slots++;
    }
    if (slots == 0) continue;
    ASSIGN_OR_RETURN(dl.gate, UploadVector(gate));
    ASSIGN_OR_RETURN(dl.up, UploadVector(up));
    ASSIGN_OR_RETURN(dl.down, UploadVector(down));
    rep->weight_bytes += static_cast<int64_t>((gate.size() + up.size() + down.size()) * 2);
  }
  const size_t rows = static_cast<size_t>(options.initial_call_rows);
  RETURN_IF_ERROR(Reserve(&rep->x, rows * rep->hidden * sizeof(float)));
  RETURN_IF_ERROR(Reserve(&rep->y, rows * rep->hidden * sizeof(float)));
  RETURN_IF_ERROR(Reserve(&rep->act, rows * rep->inter * sizeof(float)));
  return std::unique_ptr<CudaExpertExecutor>(new CudaExpertExecutor(std::move(rep)));
}

CudaExpertExecutor::CudaExpertExecutor(std::unique_ptr<Rep> rep) : rep_(std::move(rep)) {}
CudaExpertExecutor::~CudaExpertExecutor() = default;

int64_t CudaExpertExecutor::weight_bytes() const { return rep_->weight_bytes; }

absl::StatusOr<ExpertCallHandle> CudaExpertExecutor::Submit(const ExpertCall& call) {
  const ExpertCallHandle handle = rep_->next_handle++;
  rep_->done.emplace_back(handle, rep_->Run(call));
  return handle;
}

absl::Status CudaExpertExecutor::Await(ExpertCallHandle handle) {
  for (size_t i = 0; i < rep_->done.size(); ++i) {
    if (rep_->done[i].first == handle) {
      absl::Status s = std::move(rep_->done[i].second);
      rep_->done.erase(rep_->done.begin() + static_cast<std::ptrdiff_t>(i));
      return s;
    }
  }
  return absl::NotFoundError(
      absl::StrCat("expert call ", handle, " is unknown or already awaited"));
}

absl::Status CudaExpertExecutor::Rep::Run(const ExpertCall& call) {
  if (call.layer_idx < 0 || call.layer_idx >= static_cast<int32_t>(layers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert call: layer ", call.layer_idx, " out of range"));
  }
  if (call.hidden != hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert call: hidden size ", call.hidden, " does not match ", hidden));
  }
  const DeviceLayer& layer = layers[call.layer_idx];
  host_offsets.assign(1, 0);
  host_slots.clear();
  for (const ExpertBatch& b : call.batches) {
    const int32_t slot =
        b.expert_id >= 0 && b.expert_id < static_cast<int32_t>(layer.slot_of_expert.size())
            ? layer.slot_of_expert[b.expert_id]
            : -1;
    if (slot < 0) {
      return absl::InvalidArgumentError(absl::StrCat("expert call: expert ", b.expert_id,
                                                     " of layer ", call.layer_idx,
                                                     " is not loaded here"));
    }
    if (b.num_tokens < 0) return absl::InvalidArgumentError("expert call: negative num_tokens");
    host_slots.push_back(slot);
    host_offsets.push_back(host_offsets.back() + static_cast<int32_t>(b.num_tokens));
  }
  const int64_t total = host_offsets.back();
  if (total == 0) return absl::OkStatus();
  RETURN_IF_ERROR(Reserve(&x, total * hidden * sizeof(float)));
  RETURN_IF_ERROR(Reserve(&y, total * hidden * sizeof(float)));
  RETURN_IF_ERROR(Reserve(&act, total * inter * sizeof(float)));
  RETURN_IF_ERROR(Reserve(&offsets, host_offsets.size() * sizeof(int32_t)));
  RETURN_IF_ERROR(Reserve(&slots, host_slots.size() * sizeof(int32_t)));
  const cu::Stream s = stream.get();
  RETURN_IF_ERROR(cu::CopyToDeviceAsync(offsets.data(), host_offsets.data(),
                                        host_offsets.size() * sizeof(int32_t), s));
  RETURN_IF_ERROR(cu::CopyToDeviceAsync(slots.data(), host_slots.data(),
                                        host_slots.size() * sizeof(int32_t), s));
  for (size_t g = 0; g < call.batches.size(); ++g) {
    const ExpertBatch& b = call.batches[g];
    if (b.num_tokens == 0) continue;
    RETURN_IF_ERROR(cu::CopyToDeviceAsync(x.as<float>() + host_offsets[g] * hidden, b.input,
                                          b.num_tokens * hidden * sizeof(float), s));
  }
  const kernels::cuda::GroupedFfnParams p{.hidden = hidden,
                                          .inter = inter,
                                          .num_groups = static_cast<int32_t>(host_slots.size()),
                                          .total_rows = total,
                                          .offsets = offsets.as<int32_t>(),
                                          .group_slot = slots.as<int32_t>(),
                                          .gate = layer.gate.as<uint16_t>(),
                                          .up = layer.up.as<uint16_t>(),
                                          .down = layer.down.as<uint16_t>()};
  RETURN_IF_ERROR(cu::LaunchGroupedExpertFfn(p, x.as<float>(), act.as<float>(), y.as<float>(), s));
  for (size_t g = 0; g < call.batches.size(); ++g) {
    const ExpertBatch& b = call.batches[g];
    if (b.num_tokens == 0) continue;
    RETURN_IF_ERROR(cu::CopyToHostAsync(b.output, y.as<float>() + host_offsets[g] * hidden,
                                        b.num_tokens * hidden * sizeof(float), s));
  }
  return cu::Synchronize(s);
}

}  // namespace moe::engine
