// Element types of weights and activations, and exact conversions between them.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace moe::common {

// kQ8_0 is a block type made on load (never in a checkpoint file; kernels.h INT8 WEIGHTS): a row
// of k elements (k a multiple of 32) is k int8 values then k/32 f16 scales. Its element size
// (DTypeSize) is that of the int8 part; RowBytes gives a whole row's bytes.
enum class DType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kQ8_0 = 3 };

// The block size of kQ8_0 (elements per scale).
inline constexpr int64_t kQ8BlockSize = 32;

constexpr int64_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : t == DType::kQ8_0 ? 1 : 2; }

// Bytes of one row of `cols` elements. REQUIRES for kQ8_0: cols % kQ8BlockSize == 0.
constexpr int64_t RowBytes(DType t, int64_t cols) {
  return t == DType::kQ8_0 ? cols + cols / kQ8BlockSize * 2 : cols * DTypeSize(t);
}

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kQ8_0:
      return "q8_0";
  }
  return "?";
}

// bf16 -> f32 is exact.
inline float Bf16ToF32(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// f32 -> bf16, round to nearest even (NaN stays NaN), as torch does.
inline uint16_t F32ToBf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE half -> f32, exact (subnormals included).
inline float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | (exp + (127 - 15)) << 23 | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

// f32 -> IEEE half, round to nearest even, overflow to inf.
inline uint16_t F32ToF16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    int shift = 113 - static_cast<int>(abs >> 23) + 13;  // 126 - exp + 1 ... -> bits to drop
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = ((abs >> 13) - ((127 - 15) << 10));
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

// Element (row, col) of a kQ8_0 matrix with `cols` columns at `data`, exactly: d * q (an int8 times
// an f16 scale is exact in f32).
inline float Q8_0At(const void* data, int64_t cols, int64_t row, int64_t col) {
  const auto* r = static_cast<const uint8_t*>(data) + row * RowBytes(DType::kQ8_0, cols);
  uint16_t d;
  std::memcpy(&d, r + cols + col / kQ8BlockSize * 2, sizeof(d));
  return F16ToF32(d) * static_cast<float>(static_cast<int8_t>(r[col]));
}

}  // namespace moe::common
