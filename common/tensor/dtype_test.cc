#include "common/tensor/dtype.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace moe::common {
namespace {

TEST(DTypeTest, Bf16RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f)), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(-2.5f)), -2.5f);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(Bf16ToF32(F32ToBf16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DTypeTest, F16ConvertsExactlyRepresentableValues) {
  for (float v :
       {0.0f, 1.0f, -1.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, -3.140625f}) {
    EXPECT_EQ(F16ToF32(F32ToF16(v)), v) << v;
  }
  EXPECT_TRUE(std::isinf(F16ToF32(F32ToF16(1e6f))));
  // 1 + 2^-11 is halfway: ties to even.
  EXPECT_EQ(F16ToF32(F32ToF16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
}

TEST(DTypeTest, F16RoundTripOfAllHalfValues) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(F32ToF16(f), h) << std::hex << h;
  }
}

}  // namespace
}  // namespace moe::common
