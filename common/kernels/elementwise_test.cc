// RmsNorm, RoPE, Softmax, SiluMul, exp, ConvertToF32 and TopKGating: against the references under
// stated tolerances, and bitwise identical on every ISA path.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/kernels/kernels.h"
#include "common/kernels/reference/reference.h"
#include "common/kernels/test_util.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

using common::DType;
using testing::BitwiseEqual;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::ScopedIsa;
using testing::SupportedIsas;

// Runs fn() on every ISA path; all results must be bitwise identical. Returns the result.
template <typename Fn>
std::vector<float> SameOnEveryIsa(Fn fn) {
  std::vector<float> first;
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    std::vector<float> out = fn();
    if (first.empty()) {
      first = out;
    } else {
      EXPECT_TRUE(BitwiseEqual(out, first)) << isa;
    }
  }
  return first;
}

TEST(ExpTest, AccurateAndBitwiseIdenticalAcrossIsas) {
  std::vector<float> in = {0.0f,
                           -0.0f,
                           1.0f,
                           -1.0f,
                           88.0f,
                           88.5f,
                           -87.0f,
                           -87.5f,
                           -100.0f,
                           1e30f,
                           -1e30f,
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           0.5f * 0.6931472f};
  std::mt19937 rng(7);
  for (float v : RandomFloats(rng, 20000, -90.0f, 90.0f)) in.push_back(v);
  for (float v : RandomFloats(rng, 2000, -1.0f, 1.0f)) in.push_back(v);
  const auto out = SameOnEveryIsa([&] {
    std::vector<float> o(in.size());
    internal::ExpForTesting(in.data(), o.data(), static_cast<int64_t>(in.size()));
    return o;
  });
  for (size_t i = 0; i < in.size(); ++i) {
    const float x = in[i];
    if (x > 88.0f) {
      EXPECT_EQ(out[i], std::numeric_limits<float>::infinity()) << x;
    } else if (x < -87.0f) {
      EXPECT_EQ(out[i], 0.0f) << x;
    } else {
      const double want = std::exp(static_cast<double>(x));
      EXPECT_NEAR(out[i], want, 3e-7 * want) << x;
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  float nan_out = 0;
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    internal::ExpForTesting(&nan, &nan_out, 1);
    EXPECT_TRUE(std::isnan(nan_out)) << isa;
  }
}

TEST(RmsNormTest, MatchesReferenceAndIsBatchInvariant) {
  std::mt19937 rng(11);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t d : {1, 15, 64, 100, 1024}) {
      const int64_t m = 9;
      const auto w = MakeWeights(rng, dt, 1, d);
      const auto x = RandomFloats(rng, m * d, -3.0f, 3.0f);
      std::vector<float> ref(m * d);
      reference::RmsNorm(x.data(), m, d, w.view(), 1e-6f, ref.data());
      const auto out = SameOnEveryIsa([&] {
        std::vector<float> o(m * d);
        RmsNorm(x.data(), m, d, w.view(), 1e-6f, o.data());
        return o;
      });
      for (int64_t i = 0; i < m * d; ++i) {
        ASSERT_NEAR(out[i], ref[i], 2e-6f * std::fabs(ref[i]) + 1e-7f) << d;
      }
      for (int64_t i = 0; i < m; ++i) {  // a row alone, and in place
        std::vector<float> row(x.begin() + i * d, x.begin() + (i + 1) * d);
        RmsNorm(row.data(), 1, d, w.view(), 1e-6f, row.data());
        ASSERT_EQ(std::memcmp(row.data(), out.data() + i * d, d * 4), 0);
      }
    }
  }
}

TEST(RopeTest, MatchesReferenceAndDirectFormula) {
  std::mt19937 rng(13);
  const int64_t m = 6, heads = 3, hd = 64;
  const std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 8191};
  for (int64_t rotary : {64, 32}) {
    const auto x = RandomFloats(rng, m * heads * hd);
    std::vector<float> ref = x;
    reference::ApplyRope(ref.data(), m, heads, hd, rotary, pos.data(), 10000.0f);
    const auto out = SameOnEveryIsa([&] {
      std::vector<float> o = x;
      ApplyRope(o.data(), m, heads, hd, rotary, pos.data(), 10000.0f);
      return o;
    });
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 2e-6f) << i;
    // Direct formula: pair (j, j + rotary/2) is rotated by pos * theta^(-2j/rotary); features past
    // rotary_dim are untouched; position 0 is the identity.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t h = 0; h < heads; ++h) {
        const float* a = &x[(i * heads + h) * hd];
        const float* b = &out[(i * heads + h) * hd];
        for (int64_t j = 0; j < rotary / 2; ++j) {
          const double ang = pos[i] * std::pow(10000.0, -2.0 * j / rotary);
          const double x1 = a[j], x2 = a[j + rotary / 2];
          // f32 angle rounding grows with the position: |pos| * ulp(inv_freq).
          const double tol = 1e-5 + 1.2e-7 * pos[i] * 2;
          EXPECT_NEAR(b[j], x1 * std::cos(ang) - x2 * std::sin(ang), tol);
          EXPECT_NEAR(b[j + rotary / 2], x2 * std::cos(ang) + x1 * std::sin(ang), tol);
          if (pos[i] == 0) {
            EXPECT_EQ(b[j], a[j]);
          }
        }
        for (int64_t j = rotary; j < hd; ++j) EXPECT_EQ(b[j], a[j]);
      }
    }
  }
}

TEST(SoftmaxTest, MatchesReferenceAndIsStable) {
  std::mt19937 rng(17);
  for (int64_t n : {1, 3, 16, 17, 100, 32000}) {
    const int64_t m = 4;
    auto x = RandomFloats(rng, m * n, -20.0f, 20.0f);
    x[0] = 1000.0f;  // large values must not overflow
    std::vector<float> ref = x;
    reference::Softmax(ref.data(), m, n);
    const auto out = SameOnEveryIsa([&] {
      std::vector<float> o = x;
      Softmax(o.data(), m, n);
      return o;
    });
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        ASSERT_NEAR(out[i * n + j], ref[i * n + j], 1e-6f * ref[i * n + j] + 1e-9f) << n;
        sum += out[i * n + j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
    }
  }
}

TEST(SiluMulTest, MatchesReference) {
  std::mt19937 rng(19);
  for (int64_t n : {1, 7, 256, 1000, 2816}) {
    auto g = RandomFloats(rng, n, -12.0f, 12.0f);
    g[0] = -200.0f;  // exp(-g) overflows: silu -> -0
    const auto u = RandomFloats(rng, n, -2.0f, 2.0f);
    std::vector<float> ref = g;
    reference::SiluMul(ref.data(), u.data(), n);
    const auto out = SameOnEveryIsa([&] {
      std::vector<float> o = g;
      SiluMul(o.data(), u.data(), n);
      return o;
    });
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(out[i], ref[i], 1e-6f * std::fabs(ref[i]) + 1e-30f) << g[i];
    }
  }
}

TEST(ConvertTest, Bf16AndF16ConvertExactlyForEveryBitPattern) {
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      std::vector<float> out(65536);
      ConvertToF32(all.data(), dt, 65536, out.data());
      for (int i = 0; i < 65536; ++i) {
        const float want =
            dt == DType::kBF16 ? common::Bf16ToF32(all[i]) : common::F16ToF32(all[i]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(out[i])) << isa << " " << i;
        } else {
          ASSERT_EQ(std::memcmp(&out[i], &want, 4), 0) << isa << " " << i;
        }
      }
    }
  }
}

TEST(TopKGatingTest, MatchesReferenceWithTiesAndRenormalisation) {
  std::mt19937 rng(23);
  const int64_t m = 50, e = 8, k = 2;
  auto logits = RandomFloats(rng, m * e, -3.0f, 3.0f);
  for (int64_t j = 0; j < e; ++j) logits[j] = 0.5f;  // row 0: all tied -> experts 0, 1
  for (int64_t j = 0; j < e; ++j) logits[e + j] = j == 6 ? 2.0f : 1.0f;  // row 1: 6, then 0
  for (bool normalize : {false, true}) {
    std::vector<int32_t> ids(m * k), ref_ids(m * k);
    std::vector<float> w(m * k), ref_w(m * k);
    TopKGating(logits.data(), m, e, k, normalize, {ids.data(), w.data()});
    reference::TopKGating(logits.data(), m, e, k, normalize, {ref_ids.data(), ref_w.data()});
    EXPECT_EQ(ids, ref_ids);
    for (int64_t i = 0; i < m * k; ++i) EXPECT_NEAR(w[i], ref_w[i], 1e-6f);
    EXPECT_EQ(ids[0], 0);
    EXPECT_EQ(ids[1], 1);
    EXPECT_EQ(ids[2], 6);
    EXPECT_EQ(ids[3], 0);
    for (int64_t i = 0; i < m; ++i) {
      EXPECT_GE(w[i * k], w[i * k + 1]);
      if (normalize) {
        EXPECT_NEAR(w[i * k] + w[i * k + 1], 1.0f, 1e-6f);
      }
    }
    if (normalize) {
      EXPECT_EQ(w[0], 0.5f);
    }
  }
}

}  // namespace
}  // namespace moe::kernels
