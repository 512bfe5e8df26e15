// MatMul against the double-precision reference, and the NUMERICS CONTRACT of kernels.h: results
// bitwise identical across m, row position, thread count and ISA path.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <vector>

#include "common/kernels/kernels.h"
#include "common/kernels/reference/reference.h"
#include "common/kernels/test_util.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::kernels {
namespace {

using common::DType;
using testing::BitwiseEqual;
using testing::MakeWeights;
using testing::RandomFloats;
using testing::ScopedIsa;
using testing::SupportedIsas;
using testing::TestWeights;

// The contract written out in the plainest way: 16 lanes, fma in k order, zero padding, tree.
float ContractDot(const float* x, const WeightView& w, int64_t row) {
  float acc[16] = {};
  const int64_t k = w.cols;
  for (int64_t p0 = 0; p0 < k; p0 += 16) {
    for (int l = 0; l < 16; ++l) {
      const int64_t p = p0 + l;
      const float a = p < k ? x[p] : 0.0f;
      const float b = p < k ? reference::WeightAt(w, row * k + p) : 0.0f;
      acc[l] = std::fma(a, b, acc[l]);
    }
  }
  float s8[8], s4[4];
  for (int l = 0; l < 8; ++l) s8[l] = acc[l] + acc[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

struct Shape {
  int64_t m, k, n;
};

std::vector<Shape> RandomShapes(std::mt19937& rng, int count) {
  std::vector<Shape> shapes = {{1, 1, 1},    {1, 16, 1},    {3, 15, 5},  {40, 17, 9},
                               {2, 4096, 9}, {40, 4096, 3}, {7, 33, 31}, {1, 1024, 67}};
  std::uniform_int_distribution<int64_t> m(1, 40), k(1, 300), n(1, 70);
  for (int i = 0; i < count; ++i) shapes.push_back({m(rng), k(rng), n(rng)});
  return shapes;
}

class MatMulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatMulTest, MatchesReferenceOnEveryIsa) {
  std::mt19937 rng(1);
  for (const Shape& s : RandomShapes(rng, 12)) {
    const auto w = MakeWeights(rng, GetParam(), s.n, s.k);
    const auto x = RandomFloats(rng, s.m * s.k);
    std::vector<float> ref(s.m * s.n);
    reference::MatMul(x.data(), s.m, w.view(), ref.data());
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      ASSERT_TRUE(force.ok());
      std::vector<float> y(s.m * s.n);
      MatMul(x.data(), s.m, w.view(), y.data(), nullptr);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          double mag = 0;  // sum |x w|: the scale of the rounding error
          for (int64_t p = 0; p < s.k; ++p) {
            mag += std::fabs(x[i * s.k + p] * reference::WeightAt(w.view(), j * s.k + p));
          }
          ASSERT_NEAR(y[i * s.n + j], ref[i * s.n + j], 1e-5 * mag + 1e-30)
              << isa << " m=" << s.m << " k=" << s.k << " n=" << s.n << " at " << i << "," << j;
          ASSERT_EQ(y[i * s.n + j], ContractDot(&x[i * s.k], w.view(), j)) << isa;
        }
      }
    }
  }
}

TEST_P(MatMulTest, BitwiseInvariantAcrossBatchThreadsAndIsa) {
  std::mt19937 rng(2);
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int t : {1, 2, 3}) pools.push_back(std::make_unique<ThreadPool>(t));
  for (const Shape& s : RandomShapes(rng, 8)) {
    // Big enough (k * n) that the pool really splits the work.
    const int64_t n = s.n + 64;
    const auto w = MakeWeights(rng, GetParam(), n, s.k);
    const auto x = RandomFloats(rng, s.m * s.k, -4.0f, 4.0f);
    std::vector<float> base(s.m * n);
    {
      ScopedIsa force("portable");
      MatMul(x.data(), s.m, w.view(), base.data(), nullptr);
    }
    for (const char* isa : SupportedIsas()) {
      ScopedIsa force(isa);
      for (auto& pool : pools) {
        std::vector<float> y(s.m * n);
        MatMul(x.data(), s.m, w.view(), y.data(), pool.get());
        ASSERT_TRUE(BitwiseEqual(y, base)) << isa << " threads=" << pool->num_threads()
                                           << " m=" << s.m << " k=" << s.k << " n=" << n;
      }
      // Each row alone, and each row inside a batch of other rows at another position.
      for (int64_t i = 0; i < s.m; ++i) {
        std::vector<float> alone(n);
        MatMul(&x[i * s.k], 1, w.view(), alone.data(), pools[1].get());
        ASSERT_TRUE(std::equal(alone.begin(), alone.end(), base.begin() + i * n,
                               [](float a, float b) { return std::memcmp(&a, &b, 4) == 0; }))
            << isa << " row " << i;
      }
      if (s.m > 1) {
        std::vector<float> shifted_x(x.begin() + s.k, x.end());  // drop row 0: rows move up
        std::vector<float> y((s.m - 1) * n);
        MatMul(shifted_x.data(), s.m - 1, w.view(), y.data(), pools[1].get());
        ASSERT_EQ(std::memcmp(y.data(), base.data() + n, y.size() * 4), 0) << isa;
      }
    }
  }
}

TEST_P(MatMulTest, FewOutputsManyRowsSplitsRowsWithoutChangingResults) {
  std::mt19937 rng(4);
  const int64_t m = 40, k = 1000, n = 8;  // a router gate: rows are split across threads
  const auto w = MakeWeights(rng, GetParam(), n, k);
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

TEST_P(MatMulTest, AddsBiasLast) {
  std::mt19937 rng(3);
  const int64_t m = 5, k = 37, n = 11;
  const auto w = MakeWeights(rng, GetParam(), n, k);
  const auto b = MakeWeights(rng, GetParam(), 1, n);
  const auto x = RandomFloats(rng, m * k);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    std::vector<float> plain(m * n), biased(m * n);
    MatMul(x.data(), m, w.view(), plain.data(), nullptr);
    const WeightView bias = b.view();
    MatMul(x.data(), m, w.view(), biased.data(), nullptr, &bias);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        EXPECT_EQ(biased[i * n + j], plain[i * n + j] + reference::WeightAt(bias, j)) << isa;
      }
    }
  }
}

TEST_P(MatMulTest, ManyTasksInOneRegionMatchSingleMatMuls) {
  std::mt19937 rng(5);
  // Mixed shapes (q/k/v-like with a bias, an expert's few rows, an empty task, a big one that
  // crosses the parallel threshold) run together, then compared with one MatMul each.
  const std::vector<Shape> shapes = {{3, 130, 200}, {3, 130, 40},  {1, 64, 333},
                                     {0, 16, 8},    {7, 257, 100}, {12, 300, 520}};
  std::vector<TestWeights> ws, bs;
  std::vector<std::vector<float>> xs, want;
  for (const Shape& s : shapes) {
    ws.push_back(MakeWeights(rng, GetParam(), s.n, s.k));
    bs.push_back(MakeWeights(rng, GetParam(), 1, s.n));
    xs.push_back(RandomFloats(rng, s.m * s.k, -2.0f, 2.0f));
    want.emplace_back(s.m * s.n);
    const WeightView bias = bs.back().view();
    ScopedIsa force("portable");
    MatMul(xs.back().data(), s.m, ws.back().view(), want.back().data(), nullptr,
           want.size() % 2 == 1 ? &bias : nullptr);
  }
  ThreadPool pool2(2), pool3(3);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<std::vector<float>> ys;
      std::vector<WeightView> biases;
      for (size_t i = 0; i < shapes.size(); ++i) biases.push_back(bs[i].view());
      std::vector<MatMulTask> tasks;
      for (size_t i = 0; i < shapes.size(); ++i) {
        ys.emplace_back(shapes[i].m * shapes[i].n, -1.0f);
        tasks.push_back({xs[i].data(), shapes[i].m, ws[i].view(), ys[i].data(),
                         i % 2 == 0 ? &biases[i] : nullptr});
      }
      MatMulMany(tasks.data(), static_cast<int64_t>(tasks.size()), pool);
      for (size_t i = 0; i < shapes.size(); ++i) {
        ASSERT_TRUE(BitwiseEqual(ys[i], want[i]))
            << isa << " task " << i << " threads=" << (pool ? pool->num_threads() : 1);
      }
    }
  }
}

TEST_P(MatMulTest, SwiGluManyMatchesMatMulsAndSiluMul) {
  std::mt19937 rng(6);
  struct Ffn {
    int64_t m, k, inter;
  };
  const std::vector<Ffn> ffns = {{1, 96, 300}, {5, 96, 300}, {0, 96, 300}, {9, 200, 610}};
  std::vector<TestWeights> gates, ups;
  std::vector<std::vector<float>> xs, want;
  for (const Ffn& f : ffns) {
    gates.push_back(MakeWeights(rng, GetParam(), f.inter, f.k));
    ups.push_back(MakeWeights(rng, GetParam(), f.inter, f.k));
    xs.push_back(RandomFloats(rng, f.m * f.k, -3.0f, 3.0f));
    std::vector<float> g(f.m * f.inter), u(f.m * f.inter);
    ScopedIsa force("portable");
    MatMul(xs.back().data(), f.m, gates.back().view(), g.data(), nullptr);
    MatMul(xs.back().data(), f.m, ups.back().view(), u.data(), nullptr);
    SiluMul(g.data(), u.data(), f.m * f.inter);
    want.push_back(g);
  }
  ThreadPool pool2(2), pool3(3);
  for (const char* isa : SupportedIsas()) {
    ScopedIsa force(isa);
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
      std::vector<std::vector<float>> acts, scratch;
      std::vector<SwiGluTask> tasks;
      for (size_t i = 0; i < ffns.size(); ++i) {
        acts.emplace_back(ffns[i].m * ffns[i].inter);
        scratch.emplace_back(ffns[i].m * ffns[i].inter);
        tasks.push_back({xs[i].data(), ffns[i].m, gates[i].view(), ups[i].view(), acts[i].data(),
                         scratch[i].data()});
      }
      SwiGluMany(tasks.data(), static_cast<int64_t>(tasks.size()), pool);
      for (size_t i = 0; i < ffns.size(); ++i) {
        ASSERT_TRUE(BitwiseEqual(acts[i], want[i]))
            << isa << " ffn " << i << " threads=" << (pool ? pool->num_threads() : 1);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MatMulTest,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) {
                           return std::string(common::DTypeName(info.param));
                         });

TEST(MatMulDispatchTest, ActiveIsaIsTheBestSupported) {
  if (std::getenv("MOE_KERNELS_ISA") != nullptr) GTEST_SKIP() << "MOE_KERNELS_ISA is set";
  const auto isas = SupportedIsas();
  EXPECT_STREQ(ActiveIsa(), isas.front());
  {
    ScopedIsa force("portable");
    EXPECT_STREQ(ActiveIsa(), "portable");
  }
  EXPECT_STREQ(ActiveIsa(), isas.front());
  EXPECT_FALSE(internal::ForceIsaForTesting("sse9"));
}

TEST(MatMulDispatchTest, SelectIsaChoosesAPathOrSaysWhyNot) {
  if (std::getenv("MOE_KERNELS_ISA") != nullptr) GTEST_SKIP() << "MOE_KERNELS_ISA is set";
  const auto isas = SupportedIsas();
  ASSERT_THAT(SelectIsa("portable"), common::testing::IsOk());
  EXPECT_STREQ(ActiveIsa(), "portable");
  EXPECT_THAT(SelectIsa("sse9"), common::testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                                           ::testing::HasSubstr("sse9")));
  EXPECT_STREQ(ActiveIsa(), "portable");  // unchanged by the failed call
  for (const char* isa : {"avx512_bf16", "avx512", "avx2"}) {
    if (!internal::IsaSupported(isa)) {
      EXPECT_THAT(SelectIsa(isa), common::testing::StatusIs(absl::StatusCode::kFailedPrecondition));
    }
  }
  ASSERT_THAT(SelectIsa("auto"), common::testing::IsOk());
  EXPECT_STREQ(ActiveIsa(), isas.front());
}

}  // namespace
}  // namespace moe::kernels
