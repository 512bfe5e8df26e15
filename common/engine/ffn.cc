#include "common/engine/ffn.h"

namespace moe::engine {

void RunSwiGlu(const float* x, int64_t m, const model::ExpertWeights& w, FfnScratch* scratch,
               float* out, kernels::ThreadPool* pool, kernels::Activations act) {
  const int64_t inter = w.gate.rows;
  const size_t need = static_cast<size_t>(m * inter);
  if (scratch->gate.size() < need) scratch->gate.resize(need);
  if (scratch->up.size() < need) scratch->up.resize(need);
  // gate, up and the activation in one parallel region, then down: two fork/joins.
  const kernels::SwiGluTask task{x, m, w.gate, w.up, scratch->gate.data(), scratch->up.data(), act};
  kernels::SwiGluMany(&task, 1, pool);
  kernels::MatMul(scratch->gate.data(), m, w.down, out, pool, nullptr, act);
}

bool HasFfn(const model::ExpertWeights& w) {
  return w.gate.data != nullptr && w.up.data != nullptr && w.down.data != nullptr;
}

}  // namespace moe::engine
