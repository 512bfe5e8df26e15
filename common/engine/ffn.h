// The SwiGLU feed-forward block used by experts, the Qwen2-MoE shared expert and dense MLP layers:
//   out = down(silu(gate x) * up x)
// over all rows at once (one MatMul per projection, so the weights stream once per batch).
// Rows are independent and bit-exact whatever else is in the batch (kernels.h numerics contract).
#pragma once

#include <cstdint>
#include <vector>

#include "common/kernels/kernels.h"
#include "common/kernels/thread_pool.h"
#include "common/model/weights.h"

namespace moe::engine {

// Reusable scratch for RunSwiGlu (grows to the largest batch seen; no per-call allocation after).
struct FfnScratch {
  std::vector<float> gate;
  std::vector<float> up;
};

// out[m, hidden] = down(silu(gate x) * up x) for x[m, hidden]. `out` must not alias `x`.
// REQUIRES: the three views are present and shaped [inter, hidden], [inter, hidden], [hidden,
// inter]. `act`: the activation numerics of the three projections (kernels.h).
void RunSwiGlu(const float* x, int64_t m, const model::ExpertWeights& w, FfnScratch* scratch,
               float* out, kernels::ThreadPool* pool,
               kernels::Activations act = kernels::Activations::kF32);

// True when all three projections of `w` are present (non-null data).
bool HasFfn(const model::ExpertWeights& w);

}  // namespace moe::engine
