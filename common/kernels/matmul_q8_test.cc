// q8_0 weights (kernels.h INT8 WEIGHTS): the weight and activation quantizations on hand-made
// values, the dot-product contract written out plainly, bitwise identity across ISA paths (the
// AVX512BW and VPDPBUSD kernels both, where the CPU has them), thread counts, m and row position,
// MatMulMany / SwiGluMany, and the error bound against a double-precision reference.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "common/kernels/dispatch.h"
#include "common/kernels/kernels.h"
#include "common/kernels/reference/reference.h"
#include "common/kernels/test_util.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

using common::DType;
using common::kQ8BlockSize;
using testing::Bits;
using testing::BitwiseEqual;
using testing::FromBits;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::ScopedIsa;
using testing::SupportedIsas;
using testing::TestWeights;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// A q8_0 matrix quantized from random f32 values (QuantizeRowsQ8_0), and its view.
struct Q8Weights {
  std::vector<uint8_t> bytes;
  int64_t rows = 0, cols = 0;
  WeightView view() const { return WeightView{bytes.data(), DType::kQ8_0, rows, cols}; }
};
Q8Weights MakeQ8(std::mt19937& rng, int64_t rows, int64_t cols, float scale = 1.0f) {
  const auto f = RandomFloats(rng, rows * cols, -scale, scale);
  Q8Weights w{std::vector<uint8_t>(rows * common::RowBytes(DType::kQ8_0, cols)), rows, cols};
  EXPECT_TRUE(QuantizeRowsQ8_0(f.data(), DType::kF32, rows, cols, w.bytes.data(), nullptr).ok());
  return w;
}

int8_t QAt(const Q8Weights& w, int64_t row, int64_t col) {
  return static_cast<int8_t>(w.bytes[row * common::RowBytes(DType::kQ8_0, w.cols) + col]);
}
uint16_t DAt(const Q8Weights& w, int64_t row, int64_t block) {
  uint16_t h;
  std::memcpy(&h, &w.bytes[row * common::RowBytes(DType::kQ8_0, w.cols) + w.cols + 2 * block], 2);
  return h;
}

// The contract in the plainest way: 64-element chunks, lane l = 4 elements of block 2c + l / 8,
// one fma per lane and block with float(d) * xd, then the f32 tree.
float ContractDotQ8(const int8_t* xq, const float* xd, const Q8Weights& w, int64_t row) {
  const int64_t k = w.cols, nb = k / 32;
  float acc[16] = {};
  for (int64_t c = 0; 2 * c < nb; ++c) {
    for (int l = 0; l < 16; ++l) {
      const int64_t b = 2 * c + l / 8;
      if (b >= nb) continue;
      int32_t s = 0;
      for (int t = 0; t < 4; ++t) {
        const int64_t e = 64 * c + 4 * l + t;
        s += int32_t{QAt(w, row, e)} * int32_t{xq[e]};
      }
      acc[l] = std::fma(static_cast<float>(s), common::F16ToF32(DAt(w, row, b)) * xd[b], acc[l]);
    }
  }
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// ------------------------------------------------------------------ quantization

TEST(QuantizeActivationsQ8Test, HandMadeBlocks) {
  // Block 0: amax 127 (d = 1 exactly): ties to even, the amax element, negatives.
  // Block 1: zeros. Block 2: a NaN (not counted in amax; its quotient clamps to -127).
  // Block 3: amax 2.54 at a negative element: d = 2.54f / 127, that element -> -127.
  // Block 4: all NaN (amax 0: d = 0, q = 0). Block 5: an inf (d = inf: finite -> 0, inf -> -127).
  std::vector<float> x(6 * 32, 0.0f);
  const float b0[] = {2.5f, 3.5f, -2.5f, 0.5f, 1.5f, -0.5f, 127.0f, -127.0f, 126.5f, -1.49f};
  std::copy(std::begin(b0), std::end(b0), x.begin());
  x[64] = kNaN;
  x[65] = 127.0f;
  x[66] = -3.0f;
  x[96] = 1.27f;
  x[97] = -2.54f;
  x[98] = 0.01f;
  for (int j = 128; j < 160; ++j) x[j] = kNaN;
  x[160] = kInf;
  x[161] = 5.0f;
  std::vector<int8_t> q(x.size(), 99);
  std::vector<float> d(6, -1.0f);
  QuantizeActivationsQ8(x.data(), 1, static_cast<int64_t>(x.size()), q.data(), d.data());
  EXPECT_EQ(d[0], 1.0f);
  const int8_t q0[] = {2, 4, -2, 0, 2, 0, 127, -127, 126, -1};
  for (int j = 0; j < 10; ++j) EXPECT_EQ(q[j], q0[j]) << j;
  for (int j = 10; j < 32; ++j) EXPECT_EQ(q[j], 0);
  EXPECT_EQ(d[1], 0.0f);
  for (int j = 32; j < 64; ++j) EXPECT_EQ(q[j], 0);
  EXPECT_EQ(d[2], 1.0f);
  EXPECT_EQ(q[64], -127);
  EXPECT_EQ(q[65], 127);
  EXPECT_EQ(q[66], -3);
  EXPECT_EQ(Bits(d[3]), Bits(2.54f / 127.0f));
  EXPECT_EQ(q[96], 64);  // 1.27f / d is 63.5 exactly in f32: a tie, to even
  EXPECT_EQ(q[97], -127);
  EXPECT_EQ(q[98], 0);  // 0.01f / d is 0.5 exactly: a tie, to even
  EXPECT_EQ(d[4], 0.0f);
  for (int j = 128; j < 160; ++j) EXPECT_EQ(q[j], 0);
  EXPECT_EQ(d[5], kInf);
  EXPECT_EQ(q[160], -127);  // inf / inf = NaN -> -127
  EXPECT_EQ(q[161], 0);
}

// Every path's activation quantization (what MatMul runs) is bitwise the scalar definition, on
// random values, random bit patterns (NaN, inf, denormals) and ties.
TEST(QuantizeActivationsQ8Test, EveryPathGivesTheScalarBits) {
  std::mt19937 rng(20);
  const int64_t m = 7, k = 320;
  std::vector<float> x = RandomFloats(rng, m * k, -3.0f, 3.0f);
  for (int64_t i = 0; i < m * k; ++i) {
    if (rng() % 13 == 0) x[i] = FromBits(static_cast<uint32_t>(rng()));
    if (rng() % 17 == 0) x[i] = static_cast<float>(static_cast<int>(rng() % 255) - 127) + 0.5f;
    if (rng() % 29 == 0) x[i] = FromBits(static_cast<uint32_t>(rng()) & 0x807fffffu);
  }
  for (int64_t j = 0; j < 32; ++j) x[64 + j] = 0.0f;
  std::vector<int8_t> want_q(m * k);
  std::vector<float> want_d(m * k / 32);
  QuantizeActivationsQ8(x.data(), m, k, want_q.data(), want_d.data());
  std::vector<const internal::IsaKernels*> tables = {&internal::kPortableKernels};
  if (internal::IsaSupported("avx2")) tables.push_back(&internal::kAvx2Kernels);
  if (internal::IsaSupported("avx512")) tables.push_back(&internal::kAvx512Kernels);
  for (const internal::IsaKernels* t : tables) {
    std::vector<int8_t> q(m * k, 99);
    std::vector<float> d(m * k / 32, -1.0f);
    t->quantize_q8(x.data(), m, k, q.data(), d.data());
    EXPECT_EQ(q, want_q) << t->name;
    EXPECT_EQ(std::memcmp(d.data(), want_d.data(), d.size() * 4), 0) << t->name;
  }
}

TEST(QuantizeRowsQ8_0Test, HandMadeRows) {
  // Row 0, block 0: amax 127 -> d = f16(1) = 0x3c00; ties to even. Block 1: zeros -> d = 0.
  // Row 1, block 0: amax 2.54: d = f16(0.02f) = 0x251f (0.0200042725, rounded up): 2.54 / d =
  // 126.97 -> 127, -0.1 -> -5. Block 1: amax 1.0 at a negative element: d = 0x2008
  // (0.0078735352, rounded down): -1 / d = -127.008 -> -127.
  // Row 2, block 0: amax 1e-5: d = f16(7.87e-8) is the subnormal 0x0001 (2^-24); 1e-5 / d = 167.8
  // clamps to 127. Block 1: a NaN (not in amax, -> -127) with amax 127.
  const int64_t cols = 64;
  std::vector<float> src(3 * cols, 0.0f);
  const float r0[] = {2.5f, 3.5f, -2.5f, 0.5f, 127.0f, -126.5f};
  std::copy(std::begin(r0), std::end(r0), src.begin());
  src[64] = 2.54f;
  src[65] = -0.1f;
  src[96] = -1.0f;
  src[97] = 0.5f;
  src[128] = 1e-5f;
  src[129] = -2e-6f;
  src[160] = kNaN;
  src[161] = 127.0f;
  const int64_t rb = common::RowBytes(DType::kQ8_0, cols);
  ASSERT_EQ(rb, 68);
  Q8Weights w{std::vector<uint8_t>(3 * rb, 0xee), 3, cols};
  ASSERT_TRUE(QuantizeRowsQ8_0(src.data(), DType::kF32, 3, cols, w.bytes.data(), nullptr).ok());
  EXPECT_EQ(DAt(w, 0, 0), 0x3c00);
  const int8_t q0[] = {2, 4, -2, 0, 127, -126};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(QAt(w, 0, j), q0[j]) << j;
  EXPECT_EQ(DAt(w, 0, 1), 0x0000);
  for (int j = 32; j < 64; ++j) EXPECT_EQ(QAt(w, 0, j), 0);
  EXPECT_EQ(DAt(w, 1, 0), 0x251f);
  EXPECT_EQ(QAt(w, 1, 0), 127);
  EXPECT_EQ(QAt(w, 1, 1), -5);
  EXPECT_EQ(DAt(w, 1, 1), 0x2008);
  EXPECT_EQ(QAt(w, 1, 32), -127);
  EXPECT_EQ(QAt(w, 1, 33), 64);  // 0.5 / 0.0078735352 = 63.504
  EXPECT_EQ(DAt(w, 2, 0), 0x0001);
  EXPECT_EQ(QAt(w, 2, 0), 127);
  EXPECT_EQ(QAt(w, 2, 1), -34);  // -2e-6 / 2^-24 = -33.55
  EXPECT_EQ(DAt(w, 2, 1), 0x3c00);
  EXPECT_EQ(QAt(w, 2, 32), -127);
  EXPECT_EQ(QAt(w, 2, 33), 127);

  // bf16 / f16 sources of the same (representable) values give the same bytes; a pool too.
  std::mt19937 rng(21);
  std::vector<float> vals = RandomFloats(rng, 40 * 96);
  std::vector<uint16_t> b16(vals.size()), h16(vals.size());
  for (size_t i = 0; i < vals.size(); ++i) {
    b16[i] = common::F32ToBf16(vals[i]);
    vals[i] = common::Bf16ToF32(b16[i]);
    h16[i] = common::F32ToF16(vals[i]);  // bf16 values with |v| <= 1 and 8 bits fit in f16
    ASSERT_EQ(common::F16ToF32(h16[i]), vals[i]);
  }
  const int64_t rb96 = common::RowBytes(DType::kQ8_0, 96);
  std::vector<uint8_t> a(40 * rb96), b(40 * rb96), c(40 * rb96), p(40 * rb96);
  ThreadPool pool(3);
  ASSERT_TRUE(QuantizeRowsQ8_0(vals.data(), DType::kF32, 40, 96, a.data(), nullptr).ok());
  ASSERT_TRUE(QuantizeRowsQ8_0(b16.data(), DType::kBF16, 40, 96, b.data(), nullptr).ok());
  ASSERT_TRUE(QuantizeRowsQ8_0(h16.data(), DType::kF16, 40, 96, c.data(), nullptr).ok());
  ASSERT_TRUE(QuantizeRowsQ8_0(vals.data(), DType::kF32, 40, 96, p.data(), &pool).ok());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_EQ(a, p);
}

TEST(QuantizeRowsQ8_0Test, RejectsOtherDtypesAndRaggedRows) {
  std::vector<float> src(64);
  std::vector<uint8_t> dst(256);
  EXPECT_EQ(QuantizeRowsQ8_0(src.data(), DType::kQ8_0, 1, 64, dst.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(QuantizeRowsQ8_0(src.data(), DType::kF32, 2, 48, dst.data(), nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(QuantizeRowsQ8_0(src.data(), DType::kF32, 0, 64, dst.data(), nullptr).ok());
}

TEST(ConvertToF32Q8Test, DequantizesExactly) {
  std::mt19937 rng(22);
  const auto w = MakeQ8(rng, 3, 96, 4.0f);
  std::vector<float> got(96), want(96);
  const uint8_t* row1 = w.bytes.data() + common::RowBytes(DType::kQ8_0, 96);
  ConvertToF32(row1, DType::kQ8_0, 96, got.data());
  reference::ConvertToF32(row1, DType::kQ8_0, 96, want.data());
  EXPECT_TRUE(BitwiseEqual(got, want));
  for (int64_t j = 0; j < 96; ++j) {
    ASSERT_EQ(got[j], common::F16ToF32(DAt(w, 1, j / 32)) * QAt(w, 1, j));
    ASSERT_EQ(reference::WeightAt(w.view(), 2 * 96 + j),
              common::F16ToF32(DAt(w, 2, j / 32)) * QAt(w, 2, j));
  }
}

// ------------------------------------------------------------------ matmul

// Every q8_0 matmul kernel this CPU can run, by name: each table's, plus the AVX512BW one where
// the avx512 table runs VPDPBUSD instead (it is then reachable only directly).
struct Q8Kernel {
  const char* name;
  void (*fn)(const internal::MatMulArgs&, int64_t, int64_t);
};
std::vector<Q8Kernel> Q8Kernels() {
  std::vector<Q8Kernel> out = {{"portable", internal::kPortableKernels.matmul_q8}};
  if (internal::IsaSupported("avx2")) out.push_back({"avx2", internal::kAvx2Kernels.matmul_q8});
  if (internal::IsaSupported("avx512")) {
    out.push_back({"avx512bw", internal::kAvx512Kernels.matmul_q8});
  }
  if (internal::IsaSupported("avx512_vnni")) {
    out.push_back({"avx512_vnni", &internal::Avx512VnniMatMulQ8});
  }
  return out;
}

// y = x W^T through one kernel directly (columns [n0, n1) per call, like the pool's chunks).
std::vector<float> RunKernel(const Q8Kernel& kern, const float* x, int64_t m, const Q8Weights& w,
                             const WeightView* bias, int64_t chunk) {
  const int64_t k = w.cols;
  std::vector<int8_t> xq(m * k);
  std::vector<float> xd(m * k / 32);
  QuantizeActivationsQ8(x, m, k, xq.data(), xd.data());
  std::vector<float> y(m * w.rows, -7.0f);
  internal::MatMulArgs a{x,
                         m,
                         k,
                         w.bytes.data(),
                         internal::kDtQ8,
                         w.rows,
                         bias != nullptr ? bias->data : nullptr,
                         bias != nullptr ? static_cast<int>(bias->dtype) : 0,
                         y.data(),
                         nullptr,
                         xq.data(),
                         xd.data()};
  for (int64_t j = 0; j < w.rows; j += chunk) kern.fn(a, j, std::min(w.rows, j + chunk));
  return y;
}

// Every kernel and every table gives the contract's bits, for m = 1..40, odd and even k / 32,
// column ranges that start anywhere, with and without bias.
TEST(MatMulQ8Test, EveryKernelGivesTheContractBits) {
  std::mt19937 rng(23);
  for (const int64_t k : {32, 64, 96, 160, 256, 1056}) {
    const int64_t n = 45;
    const auto w = MakeQ8(rng, n, k, 0.5f);
    const int64_t m = 40;
    auto x = RandomFloats(rng, m * k, -4.0f, 4.0f);
    for (int64_t j = 0; j < 32; ++j) x[3 * k + j] = 0.0f;  // a zero block
    std::vector<int8_t> xq(m * k);
    std::vector<float> xd(m * k / 32);
    QuantizeActivationsQ8(x.data(), m, k, xq.data(), xd.data());
    std::vector<float> want(m * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        want[i * n + j] = ContractDotQ8(&xq[i * k], &xd[i * k / 32], w, j);
      }
    }
    const auto bias_w = MakeWeights(rng, DType::kBF16, 1, n);
    const WeightView bias = bias_w.view();
    std::vector<float> want_b(m * n);
    for (int64_t i = 0; i < m * n; ++i) want_b[i] = want[i] + reference::WeightAt(bias, i % n);
    for (const Q8Kernel& kern : Q8Kernels()) {
      for (const int64_t mm : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{13}, m}) {
        for (const int64_t chunk : {int64_t{7}, int64_t{16}, n}) {
          const auto y = RunKernel(kern, x.data(), mm, w, nullptr, chunk);
          ASSERT_EQ(std::memcmp(y.data(), want.data(), y.size() * 4), 0)
              << kern.name << " k=" << k << " m=" << mm << " chunk=" << chunk;
        }
      }
      const auto yb = RunKernel(kern, x.data(), m, w, &bias, 16);
      ASSERT_TRUE(BitwiseEqual(yb, want_b)) << kern.name << " k=" << k << " bias";
    }
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      std::vector<float> y(m * n);
      MatMul(x.data(), m, w.view(), y.data(), nullptr);
      ASSERT_TRUE(BitwiseEqual(y, want)) << isa << " k=" << k;
      MatMul(x.data(), m, w.view(), y.data(), nullptr, &bias, Activations::kBf16);  // mode ignored
      ASSERT_TRUE(BitwiseEqual(y, want_b)) << isa << " k=" << k << " bias";
    }
  }
}

// Thread counts 1/2/3, every path, m = 1..37 prefixes and rows at an offset: the same bits.
TEST(MatMulQ8Test, BitwiseAcrossIsaThreadsBatchAndPosition) {
  std::mt19937 rng(24);
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : {1, 2, 3}) pools.push_back(std::make_unique<ThreadPool>(t));
  const int64_t kMaxM = 37;
  for (const int64_t k : {96, 160, 512}) {
    const int64_t n = 150;
    const auto w = MakeQ8(rng, n, k);
    const auto x = RandomFloats(rng, kMaxM * k, -2.0f, 2.0f);
    std::vector<float> base(kMaxM * n);
    {
      ScopedIsa force("portable");
      MatMul(x.data(), kMaxM, w.view(), base.data(), nullptr);
    }
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      for (auto& pool : pools) {
        for (int64_t m = 1; m <= kMaxM; m += (m < 6 ? 1 : 5)) {
          std::vector<float> y(m * n);
          MatMul(x.data(), m, w.view(), y.data(), pool.get());
          ASSERT_EQ(std::memcmp(y.data(), base.data(), y.size() * 4), 0)
              << isa << " threads=" << pool->num_threads() << " m=" << m << " k=" << k;
        }
      }
      std::vector<float> y((kMaxM - 3) * n);
      MatMul(&x[3 * k], kMaxM - 3, w.view(), y.data(), pools[1].get());
      ASSERT_EQ(std::memcmp(y.data(), base.data() + 3 * n, y.size() * 4), 0) << isa << " k=" << k;
    }
  }
}

// A row's output alone is its output at any position of a 37-row batch of other rows.
TEST(MatMulQ8Test, RowResultDoesNotDependOnOtherRows) {
  std::mt19937 rng(25);
  const int64_t k = 224, n = 96, m = 37;
  const auto w = MakeQ8(rng, n, k);
  const auto row = RandomFloats(rng, k, -2.0f, 2.0f);
  ThreadPool pool(2);
  std::vector<float> alone(n);
  MatMul(row.data(), 1, w.view(), alone.data(), nullptr);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (const int64_t at : {int64_t{0}, int64_t{1}, int64_t{18}, m - 1}) {
      auto batch = RandomFloats(rng, m * k, -100.0f, 100.0f);
      std::copy(row.begin(), row.end(), batch.begin() + at * k);
      std::vector<float> y(m * n);
      MatMul(batch.data(), m, w.view(), y.data(), &pool);
      ASSERT_EQ(std::memcmp(y.data() + at * n, alone.data(), n * 4), 0) << isa << " at=" << at;
    }
  }
}

// Few outputs, many rows (the pool splits rows): the same bits.
TEST(MatMulQ8Test, FewOutputsManyRowsSplitsRowsWithoutChangingResults) {
  std::mt19937 rng(26);
  const int64_t m = 40, k = 1024, n = 8;
  const auto w = MakeQ8(rng, n, k);
  const auto x = RandomFloats(rng, m * k);
  std::vector<float> base(m * n);
  {
    ScopedIsa force("portable");
    MatMul(x.data(), m, w.view(), base.data(), nullptr);
  }
  ThreadPool pool2(2), pool3(3);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (ThreadPool* pool : {&pool2, &pool3}) {
      std::vector<float> y(m * n);
      MatMul(x.data(), m, w.view(), y.data(), pool);
      EXPECT_TRUE(BitwiseEqual(y, base)) << isa << " threads=" << pool->num_threads();
    }
  }
}

// Against the double reference of the dequantized operands (reference::MatMul quantizes x as the
// kernel does): |y - exact| <= (ceil(k/64) + 5) u sum_j |w_j x_j| (kernels.h): a lane's term is
// f32(s) * fl(d xd), one rounding in the scale product, then at most ceil(k/64) fma roundings on
// the lane's partial sums (bounded by the lane's sum of |terms|), and the tree's 4 additions.
TEST(MatMulQ8Test, WithinBoundOfDoubleReference) {
  std::mt19937 rng(27);
  for (const int64_t k : {32, 96, 160, 1024, 4096}) {
    const int64_t m = 4, n = 19;
    const auto w = MakeQ8(rng, n, k, 0.1f);
    const auto x = RandomFloats(rng, m * k, -3.0f, 3.0f);
    std::vector<int8_t> xq(m * k);
    std::vector<float> xd(m * k / 32);
    QuantizeActivationsQ8(x.data(), m, k, xq.data(), xd.data());
    std::vector<float> ref(m * n);
    reference::MatMul(x.data(), m, w.view(), ref.data());
    const double n_round = static_cast<double>((k + 63) / 64 + 5);
    const double u = std::ldexp(1.0, -24);
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      std::vector<float> y(m * n);
      MatMul(x.data(), m, w.view(), y.data(), nullptr);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double mag = 0, exact = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double t = static_cast<double>(xd[(i * k + p) / 32]) * xq[i * k + p] *
                             reference::WeightAt(w.view(), j * k + p);
            mag += std::fabs(t);
            exact += t;
          }
          const double bound = n_round * u / (1 - n_round * u) * mag;
          ASSERT_LE(std::fabs(y[i * n + j] - exact), bound) << isa << " k=" << k;
          ASSERT_LE(std::fabs(double(y[i * n + j]) - ref[i * n + j]), bound + std::fabs(exact) * u);
        }
      }
    }
  }
}

// MatMulMany (q8_0 tasks sharing an x, one reading another x, a bf16 task between) and
// SwiGluMany (gate and up sharing the quantized x) equal single MatMuls (+ SiluMul).
TEST(MatMulQ8Test, ManyAndSwiGluMatchSingleMatMuls) {
  std::mt19937 rng(28);
  const int64_t m = 11, k = 160;
  const auto x = RandomFloats(rng, m * k, -2.0f, 2.0f);
  const auto x2 = RandomFloats(rng, 3 * k, -2.0f, 2.0f);
  const std::vector<int64_t> ns = {200, 40, 40, 333};
  std::vector<Q8Weights> qw;
  for (int64_t n : ns) qw.push_back(MakeQ8(rng, n, k));
  const auto bw = MakeWeights(rng, DType::kBF16, 64, k);
  auto input = [&](size_t t) { return t == 2 ? x2.data() : x.data(); };
  auto rows = [&](size_t t) { return t == 2 ? int64_t{3} : m; };
  std::vector<std::vector<float>> want;
  for (size_t t = 0; t < ns.size(); ++t) {
    want.emplace_back(rows(t) * ns[t]);
    ScopedIsa force("portable");
    MatMul(input(t), rows(t), qw[t].view(), want[t].data(), nullptr);
  }
  std::vector<float> want_bf(m * 64);
  MatMul(x.data(), m, bw.view(), want_bf.data(), nullptr, nullptr, Activations::kBf16);
  const int64_t inter = 300;
  const auto gate = MakeQ8(rng, inter, k);
  const auto up = MakeQ8(rng, inter, k);
  std::vector<float> act_want(m * inter), up_want(m * inter);
  {
    ScopedIsa force("portable");
    MatMul(x.data(), m, gate.view(), act_want.data(), nullptr);
    MatMul(x.data(), m, up.view(), up_want.data(), nullptr);
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
        tasks.push_back({input(t), rows(t), qw[t].view(), ys[t].data(), nullptr,
                         t == 1 ? Activations::kBf16 : Activations::kF32});
      }
      std::vector<float> y_bf(m * 64);
      tasks.push_back({x.data(), m, bw.view(), y_bf.data(), nullptr, Activations::kBf16});
      MatMulMany(tasks.data(), static_cast<int64_t>(tasks.size()), pool);
      for (size_t t = 0; t < ns.size(); ++t) {
        ASSERT_TRUE(BitwiseEqual(ys[t], want[t])) << isa << " task " << t;
      }
      ASSERT_TRUE(BitwiseEqual(y_bf, want_bf)) << isa;  // kBf16 bits are every path's
      std::vector<float> act(m * inter), scratch(m * inter);
      const SwiGluTask task{x.data(), m, gate.view(), up.view(), act.data(), scratch.data()};
      SwiGluMany(&task, 1, pool);
      ASSERT_TRUE(BitwiseEqual(act, act_want)) << isa;
    }
  }
}

// The bench shapes (expert 2816 x 1024 and 1024 x 2816) at m = 1 and 5: every path, 2 threads,
// bitwise equal, and a few outputs against the reference bound.
TEST(MatMulQ8Test, BigShapes) {
  std::mt19937 rng(29);
  ThreadPool pool(2);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{2816, 1024}, {1024, 2816}}) {
    const auto w = MakeQ8(rng, n, k, 0.05f);
    const auto x = RandomFloats(rng, 5 * k, -1.0f, 1.0f);
    for (const int64_t m : {int64_t{1}, int64_t{5}}) {
      std::vector<float> base(m * n);
      {
        ScopedIsa force("portable");
        MatMul(x.data(), m, w.view(), base.data(), &pool);
      }
      for (const char* isa : SupportedIsas()) {
        ScopedIsa force(isa);
        std::vector<float> y(m * n);
        MatMul(x.data(), m, w.view(), y.data(), &pool);
        ASSERT_TRUE(BitwiseEqual(y, base)) << isa << " " << n << "x" << k << " m=" << m;
      }
      // Reference of the first 3 rows of W for each x row (cheap).
      const WeightView head{w.bytes.data(), DType::kQ8_0, 3, k};
      std::vector<float> ref(m * 3);
      reference::MatMul(x.data(), m, head, ref.data());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < 3; ++j) {
          EXPECT_NEAR(base[i * n + j], ref[i * 3 + j], 1e-4 * (1 + std::fabs(ref[i * 3 + j])));
        }
      }
    }
  }
}

TEST(MatMulQ8Test, RaggedColsDie) {
  std::vector<uint8_t> bytes(1024);
  const WeightView w{bytes.data(), DType::kQ8_0, 2, 48};
  std::vector<float> x(48), y(2);
  EXPECT_DEATH(MatMul(x.data(), 1, w, y.data(), nullptr), "multiple of 32");
}

TEST(MatMulQ8Test, VnniKernelIsPickedWhenTheCpuHasIt) {
  if (!internal::IsaSupported("avx512_vnni")) GTEST_SKIP() << "no avx512_vnni here";
  for (const char* isa : {"avx512", "avx512_bf16"}) {
    if (!internal::IsaSupported(isa)) continue;
    ScopedIsa force(isa);
    EXPECT_EQ(internal::Active().matmul_q8, &internal::Avx512VnniMatMulQ8) << isa;
  }
  EXPECT_EQ(SelectIsa("avx512_vnni").code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moe::kernels
