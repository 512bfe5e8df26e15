// The kBf16 activation mode of the MatMul family (kernels.h BF16-ACTIVATION MODE): the contract
// written out plainly, bitwise identity across ISA paths (native VDPBF16PS and the emulations),
// thread counts, m and row position, and the error bound against a double-precision reference of
// the bf16-rounded inputs.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/kernels/kernels.h"
#include "common/kernels/reference/reference.h"
#include "common/kernels/test_util.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

using common::DType;
using testing::Bits;
using testing::BitwiseEqual;
using testing::FromBits;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::ScopedIsa;
using testing::SupportedIsas;
using testing::TestWeights;

constexpr Activations kBf16 = Activations::kBf16;

float Bf16(uint16_t h) { return FromBits(static_cast<uint32_t>(h) << 16); }
float Flush(float v) {
  return (Bits(v) & 0x7fffffffu) < 0x00800000u ? FromBits(Bits(v) & 0x80000000u) : v;
}

std::vector<uint16_t> Rounded(const float* x, int64_t n) {
  std::vector<uint16_t> out(n);
  RoundToBf16(x, n, out.data());
  return out;
}

// The contract in the plainest way: 32-element chunks, lane l = pair (2l, 2l+1), the odd
// element's fma first, DAZ on weights, FTZ on each result, then the f32 tree.
float ContractDotBf16(const uint16_t* xb, const WeightView& w, int64_t row) {
  const int64_t k = w.cols;
  const uint16_t* wr = static_cast<const uint16_t*>(w.data) + row * k;
  float acc[16] = {};
  for (int64_t c = 0; c < k; c += 32) {
    for (int l = 0; l < 16; ++l) {
      const int64_t p0 = c + 2 * l, p1 = p0 + 1;
      acc[l] = Flush(
          std::fma(p1 < k ? Bf16(xb[p1]) : 0.0f, p1 < k ? Flush(Bf16(wr[p1])) : 0.0f, acc[l]));
      acc[l] = Flush(
          std::fma(p0 < k ? Bf16(xb[p0]) : 0.0f, p0 < k ? Flush(Bf16(wr[p0])) : 0.0f, acc[l]));
    }
  }
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

bool RowsEqual(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, n * 4) == 0; }

TEST(RoundToBf16Test, RoundsToNearestEvenFlushesDenormalsQuietsNans) {
  const struct {
    uint32_t in;
    uint16_t out;
  } cases[] = {
      {0x3f800000u, 0x3f80},  // 1.0 exact
      {0x3f808000u, 0x3f80},  // tie, even stays
      {0x3f818000u, 0x3f82},  // tie, odd rounds up
      {0x3f808001u, 0x3f81},  // above the tie
      {0x3f807fffu, 0x3f80},  // below the tie
      {0xbf818000u, 0xbf82},  // negative tie
      {0x007fffffu, 0x0000},  // largest denormal -> +0 (not to FLT_MIN)
      {0x80000001u, 0x8000},  // negative denormal -> -0
      {0x00800000u, 0x0080},  // FLT_MIN stays
      {0x7f7fffffu, 0x7f80},  // FLT_MAX -> inf
      {0xff800000u, 0xff80},  // -inf
      {0x7f800001u, 0x7fc0},  // signalling NaN -> quiet
      {0xffc12345u, 0xffc1},  // quiet NaN keeps sign and top payload
  };
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (const auto& c : cases) {
      const float f = FromBits(c.in);
      uint16_t out = 0;
      RoundToBf16(&f, 1, &out);
      EXPECT_EQ(out, c.out) << isa << " " << std::hex << c.in;
    }
  }
}

// The vector paths give the scalar path's bits on random bit patterns (NaNs, denormals, ties
// included) and on lengths that leave a tail.
TEST(RoundToBf16Test, EveryPathGivesTheSameBits) {
  std::mt19937 rng(10);
  std::vector<float> x(4099);
  for (float& f : x) {
    uint32_t b = static_cast<uint32_t>(rng());
    if (rng() % 4 == 0) b = (b & 0xffff0000u) | 0x8000u;  // a tie
    if (rng() % 8 == 0) b &= 0x807fffffu;                 // a denormal
    f = FromBits(b);
  }
  std::vector<uint16_t> want(x.size());
  {
    ScopedIsa force("portable");
    RoundToBf16(x.data(), static_cast<int64_t>(x.size()), want.data());
  }
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (const int64_t n : {int64_t{1}, int64_t{15}, int64_t{17}, int64_t{4099}}) {
      std::vector<uint16_t> got(n + 1, 0xabcd);
      RoundToBf16(x.data(), n, got.data());
      EXPECT_TRUE(std::equal(got.begin(), got.begin() + n, want.begin())) << isa << " n=" << n;
      EXPECT_EQ(got[n], 0xabcd) << isa << " wrote past n=" << n;
    }
  }
}

// Every ISA path, thread count 1/2/3 and m = 1..64 (each m a prefix of one 64-row batch, and the
// rows at an offset) gives the bits of the portable path, which gives the contract's.
TEST(MatMulBf16Test, BitwiseAcrossIsaThreadsBatchAndPosition) {
  std::mt19937 rng(11);
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : {1, 2, 3}) pools.push_back(std::make_unique<ThreadPool>(t));
  const int64_t kMaxM = 64;
  for (const int64_t k : {1, 31, 33, 95, 257}) {
    const int64_t n = 150;  // big enough (with m * k) that the pool splits the columns
    const auto w = MakeWeights(rng, DType::kBF16, n, k);
    const auto x = RandomFloats(rng, (kMaxM + 5) * k, -4.0f, 4.0f);
    std::vector<float> base(kMaxM * n);
    {
      ScopedIsa force("portable");
      MatMul(x.data(), kMaxM, w.view(), base.data(), nullptr, nullptr, kBf16);
    }
    const auto xb = Rounded(x.data(), kMaxM * k);
    for (int64_t i = 0; i < kMaxM; i += 7) {
      for (int64_t j = 0; j < n; j += 13) {
        ASSERT_EQ(Bits(base[i * n + j]), Bits(ContractDotBf16(&xb[i * k], w.view(), j)))
            << "k=" << k << " at " << i << "," << j;
      }
    }
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      ASSERT_TRUE(force.ok());
      for (auto& pool : pools) {
        for (int64_t m = 1; m <= kMaxM; ++m) {
          std::vector<float> y(m * n);
          MatMul(x.data(), m, w.view(), y.data(), pool.get(), nullptr, kBf16);
          ASSERT_TRUE(RowsEqual(y.data(), base.data(), m * n))
              << isa << " threads=" << pool->num_threads() << " m=" << m << " k=" << k;
        }
      }
      // Rows 3.. as a batch of their own: each row's bits do not depend on its position.
      std::vector<float> y((kMaxM - 3) * n);
      MatMul(&x[3 * k], kMaxM - 3, w.view(), y.data(), pools[1].get(), nullptr, kBf16);
      ASSERT_TRUE(RowsEqual(y.data(), base.data() + 3 * n, (kMaxM - 3) * n)) << isa << " k=" << k;
    }
  }
}

// A router-gate shape (few outputs, many rows): the pool splits rows; the bits stay the same.
TEST(MatMulBf16Test, FewOutputsManyRowsSplitsRowsWithoutChangingResults) {
  std::mt19937 rng(17);
  const int64_t m = 40, k = 1001, n = 8;
  const auto w = MakeWeights(rng, DType::kBF16, n, k);
  const auto x = RandomFloats(rng, m * k);
  std::vector<float> base(m * n);
  {
    ScopedIsa force("portable");
    MatMul(x.data(), m, w.view(), base.data(), nullptr, nullptr, kBf16);
  }
  ThreadPool pool2(2), pool3(3);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (ThreadPool* pool : {&pool2, &pool3}) {
      std::vector<float> y(m * n);
      MatMul(x.data(), m, w.view(), y.data(), pool, nullptr, kBf16);
      EXPECT_TRUE(BitwiseEqual(y, base)) << isa << " threads=" << pool->num_threads();
    }
  }
}

// A row's result is the same bits whatever other rows share its batch and wherever it sits.
TEST(MatMulBf16Test, RowResultDoesNotDependOnOtherRows) {
  std::mt19937 rng(12);
  const int64_t k = 200, n = 96;
  const auto w = MakeWeights(rng, DType::kBF16, n, k);
  const auto row = RandomFloats(rng, k, -2.0f, 2.0f);
  ThreadPool pool(2);
  std::vector<float> alone(n);
  MatMul(row.data(), 1, w.view(), alone.data(), nullptr, nullptr, kBf16);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (const int64_t m : {2, 5, 17, 40}) {
      for (const int64_t at : {int64_t{0}, m / 2, m - 1}) {
        auto batch = RandomFloats(rng, m * k, -100.0f, 100.0f);  // very different neighbours
        std::copy(row.begin(), row.end(), batch.begin() + at * k);
        std::vector<float> y(m * n);
        MatMul(batch.data(), m, w.view(), y.data(), &pool, nullptr, kBf16);
        ASSERT_TRUE(RowsEqual(y.data() + at * n, alone.data(), n))
            << isa << " m=" << m << " at=" << at;
      }
    }
  }
}

// |y - dot_double(bf16(x), w)| <= (k/16 + 5) u sum|bf16(x) w| (kernels.h): each lane takes at most
// 2 ceil(k/32) <= k/16 + 2 fma roundings, each off by <= u times a partial sum bounded by the
// lane's sum of |terms|, and the tree 4 additions (u = 2^-24; products are exact).
TEST(MatMulBf16Test, WithinBoundOfDoubleReferenceOfRoundedInputs) {
  std::mt19937 rng(13);
  for (const int64_t k : {7, 64, 129, 1000, 4097}) {
    const int64_t m = 5, n = 23;
    const auto w = MakeWeights(rng, DType::kBF16, n, k);
    const auto x = RandomFloats(rng, m * k, -3.0f, 3.0f);
    const auto xb = Rounded(x.data(), m * k);
    std::vector<float> xr(m * k);
    for (int64_t i = 0; i < m * k; ++i) xr[i] = Bf16(xb[i]);
    std::vector<float> ref(m * n);
    reference::MatMul(xr.data(), m, w.view(), ref.data());
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      std::vector<float> y(m * n);
      MatMul(x.data(), m, w.view(), y.data(), nullptr, nullptr, kBf16);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double mag = 0, exact = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double t = double(xr[i * k + p]) * reference::WeightAt(w.view(), j * k + p);
            mag += std::fabs(t);
            exact += t;
          }
          const double bound = (static_cast<double>(k) / 16 + 5) * std::ldexp(1.0, -24) * mag;
          ASSERT_LE(std::fabs(y[i * n + j] - exact), bound) << isa << " k=" << k;
          // The f32 reference (double accumulation rounded once) is within the same bound.
          ASSERT_LE(std::fabs(double(y[i * n + j]) - ref[i * n + j]),
                    bound + std::fabs(exact) * std::ldexp(1.0, -24));
        }
      }
    }
  }
}

// Denormal weights (DAZ), denormal activations (flushed by the rounding), products and sums that
// underflow (FTZ), signed zeros: every path agrees with the contract bit for bit.
TEST(MatMulBf16Test, DenormalsAndUnderflowMatchTheContractOnEveryPath) {
  std::mt19937 rng(14);
  const int64_t m = 6, k = 77, n = 40;
  TestWeights w = MakeWeights(rng, DType::kBF16, n, k);
  auto* wh = reinterpret_cast<uint16_t*>(w.bytes.data());
  std::uniform_int_distribution<int> exp_dist(0, 20), mant(0, 127), coin(0, 3);
  for (int64_t i = 0; i < n * k; ++i) {
    if (coin(rng) == 0) {  // tiny or denormal weights (exponent 0..20), either sign
      wh[i] = static_cast<uint16_t>(((rng() & 1) << 15) | (exp_dist(rng) << 7) | mant(rng));
    }
  }
  std::vector<float> x = RandomFloats(rng, m * k, -1.0f, 1.0f);
  for (int64_t i = 0; i < m * k; ++i) {
    if (coin(rng) == 0) x[i] *= 1e-38f;                 // around FLT_MIN: denormals, tiny normals
    if (coin(rng) == 0) x[i] = std::ldexp(x[i], -100);  // products far below FLT_MIN
  }
  for (int64_t i = 0; i < k; ++i) x[2 * k + i] = i % 2 == 0 ? -0.0f : 1e-39f;  // a row of ~zeros
  const auto xb = Rounded(x.data(), m * k);
  std::vector<float> want(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) want[i * n + j] = ContractDotBf16(&xb[i * k], w.view(), j);
  }
  ThreadPool pool(3);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    std::vector<float> y(m * n);
    MatMul(x.data(), m, w.view(), y.data(), &pool, nullptr, kBf16);
    EXPECT_TRUE(BitwiseEqual(y, want)) << isa;
  }
}

// kBf16 with f32/f16 weights is the f32 path; bias is added after the tree as in kF32.
TEST(MatMulBf16Test, OtherWeightDtypesUseTheF32PathAndBiasIsAddedLast) {
  std::mt19937 rng(15);
  const int64_t m = 9, k = 45, n = 30;
  for (const DType dt : {DType::kF32, DType::kF16}) {
    const auto w = MakeWeights(rng, dt, n, k);
    const auto x = RandomFloats(rng, m * k);
    std::vector<float> a(m * n), b(m * n);
    MatMul(x.data(), m, w.view(), a.data(), nullptr);
    MatMul(x.data(), m, w.view(), b.data(), nullptr, nullptr, kBf16);
    EXPECT_TRUE(BitwiseEqual(a, b)) << common::DTypeName(dt);
  }
  const auto w = MakeWeights(rng, DType::kBF16, n, k);
  const auto bias_w = MakeWeights(rng, DType::kBF16, 1, n);
  const WeightView bias = bias_w.view();
  const auto x = RandomFloats(rng, m * k);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    std::vector<float> plain(m * n), biased(m * n);
    MatMul(x.data(), m, w.view(), plain.data(), nullptr, nullptr, kBf16);
    MatMul(x.data(), m, w.view(), biased.data(), nullptr, &bias, kBf16);
    for (int64_t i = 0; i < m * n; ++i) {
      ASSERT_EQ(biased[i], plain[i] + reference::WeightAt(bias, i % n)) << isa;
    }
  }
}

// MatMulMany (tasks sharing an x, mixed modes and dtypes) and SwiGluMany in kBf16 are bitwise
// single MatMuls (+ SiluMul), on every path and thread count.
TEST(MatMulBf16Test, ManyAndSwiGluMatchSingleMatMuls) {
  std::mt19937 rng(16);
  const int64_t m = 11, k = 130;
  const auto x = RandomFloats(rng, m * k, -2.0f, 2.0f);
  const auto x2 = RandomFloats(rng, 3 * k, -2.0f, 2.0f);
  const std::vector<int64_t> ns = {200, 40, 40, 333, 64};
  std::vector<TestWeights> ws;
  for (size_t t = 0; t < ns.size(); ++t) {
    ws.push_back(MakeWeights(rng, t == 4 ? DType::kF16 : DType::kBF16, ns[t], k));
  }
  // Task 3 is kF32 on bf16 weights, task 2 reads x2, the others share x (q/k/v-like).
  auto mode = [](size_t t) { return t == 3 ? Activations::kF32 : Activations::kBf16; };
  auto input = [&](size_t t) { return t == 2 ? x2.data() : x.data(); };
  auto rows = [&](size_t t) { return t == 2 ? int64_t{3} : m; };
  std::vector<std::vector<float>> want;
  for (size_t t = 0; t < ns.size(); ++t) {
    want.emplace_back(rows(t) * ns[t]);
    ScopedIsa force("portable");
    MatMul(input(t), rows(t), ws[t].view(), want[t].data(), nullptr, nullptr, mode(t));
  }
  const int64_t inter = 300;
  const auto gate = MakeWeights(rng, DType::kBF16, inter, k);
  const auto up = MakeWeights(rng, DType::kBF16, inter, k);
  std::vector<float> act_want(m * inter), up_want(m * inter);
  {
    ScopedIsa force("portable");
    MatMul(x.data(), m, gate.view(), act_want.data(), nullptr, nullptr, kBf16);
    MatMul(x.data(), m, up.view(), up_want.data(), nullptr, nullptr, kBf16);
    SiluMul(act_want.data(), up_want.data(), m * inter);
  }
  ThreadPool pool2(2), pool3(3);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<std::vector<float>> ys;
      std::vector<MatMulTask> tasks;
      for (size_t t = 0; t < ns.size(); ++t) {
        ys.emplace_back(rows(t) * ns[t], -1.0f);
        tasks.push_back({input(t), rows(t), ws[t].view(), ys[t].data(), nullptr, mode(t)});
      }
      MatMulMany(tasks.data(), static_cast<int64_t>(tasks.size()), pool);
      for (size_t t = 0; t < ns.size(); ++t) {
        ASSERT_TRUE(BitwiseEqual(ys[t], want[t])) << isa << " task " << t;
      }
      std::vector<float> act(m * inter), scratch(m * inter);
      const SwiGluTask task{x.data(), m, gate.view(), up.view(), act.data(), scratch.data(), kBf16};
      SwiGluMany(&task, 1, pool);
      ASSERT_TRUE(BitwiseEqual(act, act_want)) << isa;
    }
  }
}

TEST(MatMulBf16Test, NativePathIsPickedWhenTheCpuHasIt) {
  if (std::getenv("MOE_KERNELS_ISA") != nullptr) GTEST_SKIP() << "MOE_KERNELS_ISA is set";
  if (!internal::IsaSupported("avx512_bf16")) GTEST_SKIP() << "no avx512_bf16 here";
  EXPECT_STREQ(ActiveIsa(), "avx512_bf16");
  EXPECT_STREQ(ActivationsName(Activations::kBf16), "bf16");
  EXPECT_STREQ(ActivationsName(Activations::kF32), "f32");
}

}  // namespace
}  // namespace moe::kernels
