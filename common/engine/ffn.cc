#include "common/engine/ffn.h"

namespace moe::engine {

void RunSwiGlu(const float* x, int64_t m, const model::ExpertWeights& w, FfnScratch* scratch,
               float* out, kernels::ThreadPool* pool) {
  const int64_t inter = w.gate.rows;
  const size_t need = static_cast<size_t>(m * inter);
  if (scratch->gate.size() < need) scratch->gate.resize(need);
  if (scratch->up.size() < need) scratch->up.resize(need);
  kernels::MatMul(x, m, w.gate, scratch->gate.data(), pool);
  kernels::MatMul(x, m, w.up, scratch->up.data(), pool);
  kernels::SiluMul(scratch->gate.data(), scratch->up.data(), m * inter);
  kernels::MatMul(scratch->gate.data(), m, w.down, out, pool);
}

bool HasFfn(const model::ExpertWeights& w) {
  return w.gate.data != nullptr && w.up.data != nullptr && w.down.data != nullptr;
}

}  // namespace moe::engine
