#include "common/model/reference/reference_forward.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "common/model/checkpoint.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"

namespace moe::model::reference {
namespace {

namespace fs = std::filesystem;
using common::DType;
using common::testing::StatusIs;

constexpr Arch kArchs[] = {Arch::kMixtral, Arch::kQwen2Moe, Arch::kQwen3Moe, Arch::kOlmoe};

std::vector<int32_t> RandomTokens(int n, uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(3, vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = dist(rng);
  return t;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double{a[i]} - b[i]));
  return m;
}

double Margin(const std::vector<float>& logits) {
  std::vector<float> s = logits;
  std::partial_sort(s.begin(), s.begin() + 2, s.end(), std::greater<float>());
  return double{s[0]} - s[1];
}

class ReferenceForwardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("reference_test"));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  // A tiny-preset checkpoint, generated once per (arch, dtype, skew) for the suite.
  static const Checkpoint& Tiny(Arch arch, DType dtype = DType::kF32, double skew = 0) {
    static std::map<std::tuple<Arch, DType, double>, std::unique_ptr<Checkpoint>> cache;
    auto& slot = cache[{arch, dtype, skew}];
    if (slot == nullptr) {
      MakeModelOptions o;
      o.arch = arch;
      o.dtype = dtype;
      o.gate_skew = skew;
      o.seed = 1;
      const std::string out = absl::StrCat(*dir_, "/", std::string(ModelTypeName(arch)), "_",
                                           std::string(common::DTypeName(dtype)), "_", skew);
      MOE_CHECK_OK(MakeModel(o, out));
      auto ck = Checkpoint::Open(out);
      MOE_CHECK_OK(ck.status());
      slot = std::move(*ck);
    }
    return *slot;
  }

  static std::string* dir_;
};
std::string* ReferenceForwardTest::dir_ = nullptr;

TEST_F(ReferenceForwardTest, ChangingAnEarlyTokenChangesLaterLogitsClearly) {
  for (Arch arch : kArchs) {
    const Checkpoint& ck = Tiny(arch);
    std::vector<int32_t> a = RandomTokens(24, 11, 512);
    std::vector<int32_t> b = a;
    b[1] = a[1] == 100 ? 101 : 100;
    ASSERT_OK_AND_ASSIGN(auto la, ReferenceLogits(ck.config(), ck.weights(), a));
    ASSERT_OK_AND_ASSIGN(auto lb, ReferenceLogits(ck.config(), ck.weights(), b));
    EXPECT_EQ(MaxAbsDiff(la[0], lb[0]), 0.0) << "causal: position 0 cannot see position 1";
    const double last = MaxAbsDiff(la.back(), lb.back());
    EXPECT_GT(last, 1.0) << ModelTypeName(arch);
    // Logits spread over several units.
    double mean = 0, var = 0;
    for (float x : la.back()) mean += x / 512.0;
    for (float x : la.back()) var += (x - mean) * (x - mean) / 512.0;
    EXPECT_GT(std::sqrt(var), 3.0) << ModelTypeName(arch);
  }
}

TEST_F(ReferenceForwardTest, GreedyDecodingHasClearTopOneMargins) {
  for (Arch arch : kArchs) {
    const Checkpoint& ck = Tiny(arch);
    std::vector<double> margins;
    std::set<int32_t> distinct;
    for (uint32_t p = 0; p < 4; ++p) {
      std::vector<std::vector<float>> steps;
      ASSERT_OK_AND_ASSIGN(auto out, ReferenceGreedy(ck.config(), ck.weights(),
                                                     RandomTokens(8, 100 + p, 512), 24, &steps));
      ASSERT_EQ(out.size(), 24u);
      ASSERT_EQ(steps.size(), 24u);
      for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(out[i], std::max_element(steps[i].begin(), steps[i].end()) - steps[i].begin());
        margins.push_back(Margin(steps[i]));
        distinct.insert(out[i]);
      }
    }
    std::sort(margins.begin(), margins.end());
    const double median = margins[margins.size() / 2];
    const auto small =
        std::count_if(margins.begin(), margins.end(), [](double m) { return m < 0.01; });
    EXPECT_GT(median, 0.5) << ModelTypeName(arch);
    EXPECT_LE(small, 3) << ModelTypeName(arch) << ": margins below 0.01 (of 96)";
    EXPECT_GE(distinct.size(), 8u) << ModelTypeName(arch) << ": greedy output is degenerate";
  }
}

TEST_F(ReferenceForwardTest, LogitsDoNotDependOnChunkingOrOnLaterTokens) {
  for (Arch arch : kArchs) {
    const Checkpoint& ck = Tiny(arch);
    const std::vector<int32_t> tokens = RandomTokens(20, 5, 512);
    ASSERT_OK_AND_ASSIGN(auto full, ReferenceLogits(ck.config(), ck.weights(), tokens));
    ASSERT_EQ(full.size(), 20u);
    // Prefixes: the first rows are bitwise the same.
    ASSERT_OK_AND_ASSIGN(auto prefix,
                         ReferenceLogits(ck.config(), ck.weights(), std::span(tokens).first(7)));
    for (size_t i = 0; i < prefix.size(); ++i) EXPECT_EQ(prefix[i], full[i]) << i;
    // Chunks 3 + 1 + 5 + 11.
    ASSERT_OK_AND_ASSIGN(ReferenceModel m, ReferenceModel::Create(ck.config(), ck.weights()));
    std::vector<std::vector<double>> rows;
    size_t begin = 0;
    for (size_t n : {3u, 1u, 5u, 11u}) {
      ASSERT_OK_AND_ASSIGN(auto part, m.Forward(std::span(tokens).subspan(begin, n)));
      rows.insert(rows.end(), part.begin(), part.end());
      begin += n;
    }
    EXPECT_EQ(m.num_tokens(), 20);
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(std::vector<float>(rows[i].begin(), rows[i].end()), full[i]) << i;
    }
    // Greedy steps equal teacher-forced logits of prompt + output.
    std::vector<std::vector<float>> steps;
    ASSERT_OK_AND_ASSIGN(auto out, ReferenceGreedy(ck.config(), ck.weights(),
                                                   std::span(tokens).first(6), 5, &steps));
    std::vector<int32_t> all(tokens.begin(), tokens.begin() + 6);
    all.insert(all.end(), out.begin(), out.end() - 1);
    ASSERT_OK_AND_ASSIGN(auto forced, ReferenceLogits(ck.config(), ck.weights(), all));
    for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], forced[5 + i]) << i;
  }
}

TEST_F(ReferenceForwardTest, RoutingIsSoftmaxTopKAsEachArchitectureDefines) {
  for (Arch arch : kArchs) {
    const Checkpoint& ck = Tiny(arch);
    const ModelConfig& c = ck.config();
    const std::vector<int32_t> tokens = RandomTokens(16, 9, 512);
    ReferenceTrace trace;
    ASSERT_OK_AND_ASSIGN(auto logits, ReferenceLogits(c, ck.weights(), tokens, &trace));
    ASSERT_EQ(trace.experts.size(), 2u);
    std::vector<int> used(8, 0);
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
      const auto& e = trace.experts[0][pos];
      const auto& w = trace.weights[0][pos];
      ASSERT_EQ(e.size(), 2u);
      EXPECT_NE(e[0], e[1]);
      EXPECT_GE(w[0], w[1]);
      if (c.norm_topk_prob) {
        EXPECT_NEAR(w[0] + w[1], 1.0, 1e-12) << ModelTypeName(arch);
      } else {
        EXPECT_LT(w[0] + w[1], 1.0) << ModelTypeName(arch);  // raw softmax probabilities
        EXPECT_GT(w[0], 1.0 / 8);
      }
      for (int32_t x : e) used[x]++;
    }
    EXPECT_EQ(arch == Arch::kMixtral || arch == Arch::kQwen3Moe, c.norm_topk_prob);
    // Only the chosen experts matter: garbage in an unused expert changes nothing, in a used
    // one it changes the logits.
    const int unused = static_cast<int>(std::find(used.begin(), used.end(), 0) - used.begin());
    const int hot = static_cast<int>(std::max_element(used.begin(), used.end()) - used.begin());
    std::vector<float> garbage(c.moe_intermediate_size * c.hidden_size, 1e3f);
    for (int victim : {unused, hot}) {
      if (victim == 8) continue;  // every expert was used
      ModelWeights w = ck.weights();
      w.layers[0].experts[victim].down.data = garbage.data();
      w.layers[0].experts[victim].down.dtype = DType::kF32;
      ASSERT_OK_AND_ASSIGN(auto changed, ReferenceLogits(c, w, tokens));
      if (victim == unused) {
        EXPECT_EQ(changed, logits) << ModelTypeName(arch);
      } else {
        EXPECT_GT(MaxAbsDiff(changed.back(), logits.back()), 1.0) << ModelTypeName(arch);
      }
    }
  }
}

TEST_F(ReferenceForwardTest, Qwen2SharedExpertAndBiasesContribute) {
  const Checkpoint& ck = Tiny(Arch::kQwen2Moe);
  const std::vector<int32_t> tokens = RandomTokens(8, 4, 512);
  ASSERT_OK_AND_ASSIGN(auto base, ReferenceLogits(ck.config(), ck.weights(), tokens));
  std::vector<float> zeros(256 * 64, 0.0f);
  {
    ModelWeights w = ck.weights();
    w.layers[1].shared_expert.down.data = zeros.data();
    ASSERT_OK_AND_ASSIGN(auto l, ReferenceLogits(ck.config(), w, tokens));
    EXPECT_GT(MaxAbsDiff(l.back(), base.back()), 0.1);
  }
  {
    ModelWeights w = ck.weights();
    w.layers[0].k_bias.data = zeros.data();
    ASSERT_OK_AND_ASSIGN(auto l, ReferenceLogits(ck.config(), w, tokens));
    EXPECT_GT(MaxAbsDiff(l.back(), base.back()), 0.1);
  }
}

TEST_F(ReferenceForwardTest, SlidingWindowBoundsTheReceptiveField) {
  const Checkpoint& ck = Tiny(Arch::kMixtral);
  ModelConfig c = ck.config();
  c.sliding_window = 4;  // each layer sees keys i-3..i; two layers: tokens i-6..i
  std::vector<int32_t> a = RandomTokens(12, 3, 512), b = a;
  b[0] = a[0] == 50 ? 51 : 50;
  ASSERT_OK_AND_ASSIGN(auto la, ReferenceLogits(c, ck.weights(), a));
  ASSERT_OK_AND_ASSIGN(auto lb, ReferenceLogits(c, ck.weights(), b));
  EXPECT_GT(MaxAbsDiff(la[6], lb[6]), 0.0);
  for (int p = 7; p < 12; ++p) EXPECT_EQ(la[p], lb[p]) << p;
  ASSERT_OK_AND_ASSIGN(auto full_a, ReferenceLogits(ck.config(), ck.weights(), a));
  ASSERT_OK_AND_ASSIGN(auto full_b, ReferenceLogits(ck.config(), ck.weights(), b));
  EXPECT_GT(MaxAbsDiff(full_a[11], full_b[11]), 0.0);  // without the window it does reach
}

TEST_F(ReferenceForwardTest, Bf16AndF16WeightsAgreeWithF32WithinRounding) {
  for (Arch arch : kArchs) {
    const Checkpoint& f32 = Tiny(arch, DType::kF32);
    const std::vector<int32_t> tokens = RandomTokens(12, 21, 512);
    ASSERT_OK_AND_ASSIGN(auto ref, ReferenceLogits(f32.config(), f32.weights(), tokens));
    for (DType dtype : {DType::kBF16, DType::kF16}) {
      const Checkpoint& low = Tiny(arch, dtype);
      ASSERT_OK_AND_ASSIGN(auto l, ReferenceLogits(low.config(), low.weights(), tokens));
      const double tol = dtype == DType::kBF16 ? 0.5 : 0.05;
      EXPECT_LT(MaxAbsDiff(l.back(), ref.back()), tol)
          << ModelTypeName(arch) << " " << common::DTypeName(dtype);
      EXPECT_GT(MaxAbsDiff(l.back(), ref.back()), 0.0);
    }
  }
}

// Spearman rank correlation between expert rank (1 = hottest by construction) and load.
double RankLoadCorrelation(const std::vector<int64_t>& rank_of, const std::vector<int>& load) {
  const int n = static_cast<int>(load.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return load[a] > load[b]; });
  std::vector<double> load_rank(n);
  for (int i = 0; i < n; ++i) load_rank[order[i]] = i + 1;
  double d2 = 0;
  for (int e = 0; e < n; ++e) d2 += (rank_of[e] - load_rank[e]) * (rank_of[e] - load_rank[e]);
  return 1.0 - 6.0 * d2 / (n * (n * n - 1.0));
}

TEST_F(ReferenceForwardTest, GateSkewMakesExpertLoadFallWithRank) {
  MakeModelOptions o;
  o.seed = 1;
  o.gate_skew = 1.2;
  for (auto [arch, skew] : {std::pair{Arch::kMixtral, 0.0}, std::pair{Arch::kMixtral, 1.2},
                            std::pair{Arch::kQwen2Moe, 1.2}, std::pair{Arch::kQwen3Moe, 1.2},
                            std::pair{Arch::kOlmoe, 1.2}}) {
    o.arch = arch;
    const Checkpoint& ck = Tiny(arch, DType::kF32, skew);
    ReferenceTrace trace;
    ASSERT_OK(
        ReferenceLogits(ck.config(), ck.weights(), RandomTokens(256, 77, 512), &trace).status());
    for (int64_t layer = 0; layer < 2; ++layer) {
      std::vector<int> load(8, 0);
      for (const auto& pos : trace.experts[layer]) {
        for (int32_t e : pos) load[e]++;
      }
      const std::vector<int64_t> rank = GateSkewRanks(o, layer);
      std::vector<int> by_rank(8);
      for (int e = 0; e < 8; ++e) by_rank[rank[e] - 1] = load[e];
      const double rho = RankLoadCorrelation(rank, load);
      const double ratio = static_cast<double>(*std::max_element(load.begin(), load.end())) /
                           std::max(1, *std::min_element(load.begin(), load.end()));
      if (skew > 0) {
        // Zipf(1.2) over 8 experts gives the hottest 43% of the load and the coldest 3.6%;
        // uniform load would be 0.73 away from it in L1.
        double l1 = 0, h = 0;
        for (int r = 1; r <= 8; ++r) h += std::pow(r, -1.2);
        for (int r = 1; r <= 8; ++r) l1 += std::abs(by_rank[r - 1] / 512.0 - std::pow(r, -1.2) / h);
        const std::string what = absl::StrCat(std::string(ModelTypeName(arch)), " layer ", layer,
                                              " load by rank ", ::testing::PrintToString(by_rank));
        EXPECT_GT(rho, 0.8) << what;
        EXPECT_LT(l1, 0.5) << what;
        EXPECT_GT(by_rank[0], 4 * by_rank[7]) << what;
        EXPECT_GT(by_rank[0], 0.3 * 512) << what;
        EXPECT_LT(by_rank[0], 0.6 * 512) << what;
      } else {
        EXPECT_LT(ratio, 8.0) << "unskewed load " << ::testing::PrintToString(load);
        EXPECT_LT(*std::max_element(load.begin(), load.end()), 0.3 * 512);
      }
    }
  }
}

TEST_F(ReferenceForwardTest, ErrorsInsteadOfCrashes) {
  const Checkpoint& ck = Tiny(Arch::kOlmoe);
  const std::vector<int32_t> bad = {1, 512};
  EXPECT_THAT(ReferenceLogits(ck.config(), ck.weights(), bad),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("512")));
  ModelWeights w = ck.weights();
  w.layers[1].experts[3].up = WeightView{};
  EXPECT_THAT(
      ReferenceLogits(ck.config(), w, std::vector<int32_t>{1, 2}),
      StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("layer 1 expert 3 up")));
  EXPECT_THAT(ReferenceGreedy(ck.config(), ck.weights(), {}, 3),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::model::reference
