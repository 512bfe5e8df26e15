// The one exp of the kernels: ExpF, a Cephes-style expf made only of f32 mul/add/sub (no fma) so
// the scalar version here and the AVX2/AVX-512 versions (same operations, same order) are bitwise
// identical. Relative error <= ~2 ulp on [-87, 88]. Results: +inf for x > 88, 0 for x < -87
// (the subnormal range is flushed to 0), NaN for NaN.
//
// Functions are `static inline` on purpose: each translation unit (compiled with its own ISA
// flags) gets its own private copy, so the linker never mixes them.
#pragma once

#include <cstdint>
#include <cstring>

namespace moe::kernels::internal::expf_consts {
inline constexpr float kHi = 88.0f;
inline constexpr float kLo = -87.0f;
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kP0 = 1.9875691500e-4f;
inline constexpr float kP1 = 1.3981999507e-3f;
inline constexpr float kP2 = 8.3334519073e-3f;
inline constexpr float kP3 = 4.1665795894e-2f;
inline constexpr float kP4 = 1.6666665459e-1f;
inline constexpr float kP5 = 5.0000001201e-1f;
}  // namespace moe::kernels::internal::expf_consts

namespace moe::kernels::internal {

// Requires -ffp-contract=off in the including unit (the kernels library sets it).
static inline float ExpFScalar(float x) {
  using namespace expf_consts;
  const float t = x * kLog2e + kMagic;
  const float n = t - kMagic;
  float r = x - n * kLn2Hi;
  r = r - n * kLn2Lo;
  const float z = r * r;
  float p = kP0 * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  p = p * z + r;
  p = p + 1.0f;
  // 2^n for n in [-126, 127] (guaranteed by the clamps below for the selected results).
  // The clamp sends NaN to -126 (as maxps does), so the conversion is always defined.
  float nc = n;
  if (!(nc >= -126.0f)) nc = -126.0f;
  if (nc > 127.0f) nc = 127.0f;
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(nc) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  const float result = p * scale;
  if (x > kHi) return __builtin_inff();
  if (x < kLo) return 0.0f;
  return result;
}

}  // namespace moe::kernels::internal
