// The portable path: baseline x86-64 (or any) code, 16 lanes in arrays with std::fma.
#define MOE_ISA_NS portable
#include <vector>

#include "common/kernels/isa_common.inc"
#include "common/tensor/dtype.h"

namespace moe::kernels::portable {
namespace {

float LoadElem(const void* p, int dtype, int64_t i) {
  switch (dtype) {
    case internal::kDtBf16:
      return common::Bf16ToF32(static_cast<const uint16_t*>(p)[i]);
    case internal::kDtF16:
      return common::F16ToF32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

void ConvertImpl(const void* src, int dtype, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadElem(src, dtype, i);
}

void MatMulImpl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.k;
  const int elem = a.w_dtype == internal::kDtF32 ? 4 : 2;
  std::vector<float> wrow(k);
  for (int64_t j = n_begin; j < n_end; ++j) {
    ConvertImpl(static_cast<const char*>(a.w) + j * k * elem, a.w_dtype, k, wrow.data());
    const float bias = a.bias != nullptr ? LoadElem(a.bias, a.bias_dtype, j) : 0.0f;
    for (int64_t i = 0; i < a.m; ++i) {
      float v = Dot(a.x + i * k, wrow.data(), k);
      if (a.bias != nullptr) v = v + bias;
      a.y[i * a.n + j] = v;
    }
  }
}

}  // namespace
}  // namespace moe::kernels::portable

namespace moe::kernels::internal {
const IsaKernels kPortableKernels = {
    "portable",
    &portable::MatMulImpl,
    &portable::RmsNormImpl,
    &portable::SoftmaxImpl,
    &portable::SiluMulImpl,
    &portable::AttentionImpl,
    &portable::ExpArray,
    &portable::ConvertImpl,
};
}  // namespace moe::kernels::internal
