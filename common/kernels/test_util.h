// Helpers shared by the kernel tests.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/kernels/dispatch.h"
#include "common/kernels/kernels.h"
#include "common/tensor/dtype.h"

namespace moe::kernels::testing {

// A float's bits and back.
inline uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// The ISA paths this CPU can run ("portable" always).
inline std::vector<const char*> SupportedIsas() {
  std::vector<const char*> out;
  for (const char* isa : {"avx512_bf16", "avx512", "avx2", "portable"}) {
    if (internal::IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

// Forces an ISA for the scope, restoring the automatic choice after.
class ScopedIsa {
 public:
  explicit ScopedIsa(const char* isa) { ok_ = internal::ForceIsaForTesting(isa); }
  ~ScopedIsa() { internal::ForceIsaForTesting(nullptr); }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// A weight matrix stored in `dtype` (values rounded to that type), plus its view.
struct TestWeights {
  std::vector<uint8_t> bytes;
  common::DType dtype;
  int64_t rows = 0, cols = 0;
  WeightView view() const { return WeightView{bytes.data(), dtype, rows, cols}; }
};

inline TestWeights MakeWeights(std::mt19937& rng, common::DType dtype, int64_t rows, int64_t cols,
                               float scale = 1.0f) {
  TestWeights w{{}, dtype, rows, cols};
  const std::vector<float> f = RandomFloats(rng, rows * cols, -scale, scale);
  w.bytes.resize(rows * cols * common::DTypeSize(dtype));
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (dtype == common::DType::kF32) {
      std::memcpy(w.bytes.data() + 4 * i, &f[i], 4);
    } else {
      const uint16_t h =
          dtype == common::DType::kBF16 ? common::F32ToBf16(f[i]) : common::F32ToF16(f[i]);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
    }
  }
  return w;
}

inline bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp on the null data() of an empty vector is undefined (UBSan's nonnull-attribute check).
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace moe::kernels::testing
