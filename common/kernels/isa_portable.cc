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

// The kBf16 contract in plain scalar code: 16 lanes, 32-element chunks (zero padded), per lane
// the odd element's fma then the even one's, each flushed; then the tree.
void RoundBf16Impl(const float* src, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = RoundBf16Scalar(src[i]);
}

void MatMulBf16Impl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.k;
  const uint16_t* w = static_cast<const uint16_t*>(a.w);
  for (int64_t j = n_begin; j < n_end; ++j) {
    const uint16_t* wr = w + j * k;
    const float bias = a.bias != nullptr ? LoadElem(a.bias, a.bias_dtype, j) : 0.0f;
    for (int64_t i = 0; i < a.m; ++i) {
      const uint16_t* xr = a.xb + i * k;
      float acc[16] = {};
      for (int64_t p0 = 0; p0 < k; p0 += 32) {
        for (int l = 0; l < 16; ++l) {
          const int64_t e0 = p0 + 2 * l, e1 = e0 + 1;
          const float x1 = e1 < k ? Bf16Bits(xr[e1]) : 0.0f;
          const float w1 = e1 < k ? FlushDenormal(Bf16Bits(wr[e1])) : 0.0f;
          const float x0 = e0 < k ? Bf16Bits(xr[e0]) : 0.0f;
          const float w0 = e0 < k ? FlushDenormal(Bf16Bits(wr[e0])) : 0.0f;
          acc[l] = FlushDenormal(std::fma(x1, w1, acc[l]));
          acc[l] = FlushDenormal(std::fma(x0, w0, acc[l]));
        }
      }
      float v = ReduceLanes(acc);
      if (a.bias != nullptr) v = v + bias;
      a.y[i * a.n + j] = v;
    }
  }
}

// The q8_0 contract in plain integer loops: per 64-element chunk c, lane l takes the 4 elements
// 64c + 4l.. of block 2c + l / 8 (skipped past the last block), s exact in int32, one fma of
// float(s) and float(d_w) * xd per lane and block; then the tree.
void MatMulQ8Impl(const internal::MatMulArgs& a, int64_t n_begin, int64_t n_end) {
  const int64_t k = a.k;
  const int64_t nb = k / 32;
  const int64_t rb = Q8RowBytes(k);
  std::vector<float> dw(nb);
  for (int64_t j = n_begin; j < n_end; ++j) {
    const int8_t* wq = reinterpret_cast<const int8_t*>(static_cast<const char*>(a.w) + j * rb);
    for (int64_t b = 0; b < nb; ++b) {
      uint16_t h;
      std::memcpy(&h, reinterpret_cast<const char*>(wq) + k + 2 * b, 2);
      dw[b] = common::F16ToF32(h);
    }
    const float bias = a.bias != nullptr ? LoadElem(a.bias, a.bias_dtype, j) : 0.0f;
    for (int64_t i = 0; i < a.m; ++i) {
      const int8_t* xq = a.xq + i * k;
      const float* xd = a.xd + i * nb;
      float acc[16] = {};
      for (int64_t c = 0; 2 * c < nb; ++c) {
        for (int l = 0; l < 16; ++l) {
          const int64_t b = 2 * c + l / 8;
          if (b >= nb) continue;
          const int64_t e = 64 * c + 4 * l;
          int32_t s = 0;
          for (int t = 0; t < 4; ++t) s += int32_t{wq[e + t]} * int32_t{xq[e + t]};
          const float sd = dw[b] * xd[b];
          acc[l] = std::fma(static_cast<float>(s), sd, acc[l]);
        }
      }
      float v = ReduceLanes(acc);
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
    &portable::MatMulBf16Impl,
    &portable::RoundBf16Impl,
    &portable::MatMulQ8Impl,
    &portable::QuantizeQ8Scalar,
};
}  // namespace moe::kernels::internal
