// An in-memory random MoE model (config + weight views over owned buffers) for engine tests that
// need no checkpoint on disk: batch invariance, KV-cache sensitivity, step validation.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "common/model/model_config.h"
#include "common/model/weights.h"
#include "common/tensor/dtype.h"

namespace moe::engine::testing {

struct RandomModel {
  model::ModelConfig config;
  model::ModelWeights weights;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> buffers;  // own the view memory
};

// The tiny preset's shape (hidden 64, 2 layers, 4/2 heads, 8 experts top-2, vocab 512) for
// `arch`, weights ~ N(0, 1/fan_in)-scaled uniform from `seed`, stored as `dtype`.
std::unique_ptr<RandomModel> MakeTinyRandomModel(model::Arch arch, common::DType dtype,
                                                 uint64_t seed = 1);

}  // namespace moe::engine::testing
