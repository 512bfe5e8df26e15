#include "common/engine/sampler.h"

#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using ::moe::generation::LogprobsMode;
using ::moe::generation::SamplingParams;

// Logits whose softmax is, for temperature 1, proportional to `weights`.
std::vector<float> LogitsFromProbs(const std::vector<double>& weights) {
  std::vector<float> l;
  for (double w : weights) l.push_back(w > 0 ? static_cast<float>(std::log(w)) : -1e30f);
  return l;
}

// The set of tokens drawn over `n` seeds.
std::set<int32_t> Support(const SamplingParams& p, const std::vector<float>& logits, int n = 400) {
  std::set<int32_t> seen;
  for (int s = 0; s < n; ++s) {
    SequenceSampler sampler(p, {}, static_cast<int64_t>(logits.size()), static_cast<uint64_t>(s));
    seen.insert(sampler.Sample(logits).token_id);
  }
  return seen;
}

TEST(SamplerTest, GreedyTakesArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0;
  SequenceSampler s(p, {}, 5, 1);
  EXPECT_EQ(s.Sample(std::vector<float>{0.f, 3.f, 1.f, 3.f, -1.f}).token_id, 1);
}

TEST(SamplerTest, SeededStreamIsReproducibleAndIndependentOfOtherDraws) {
  SamplingParams p;
  p.seed = 42;
  const std::vector<float> logits = LogitsFromProbs({1, 1, 1, 1, 1, 1, 1, 1});
  SequenceSampler a(p, {}, 8, 0), b(p, {}, 8, 999);
  SequenceSampler other(SamplingParams{}, {}, 8, 7);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 32; ++i) {
    ta.push_back(a.Sample(logits).token_id);
    other.Sample(logits);  // interleaved draws of another request change nothing
    tb.push_back(b.Sample(logits).token_id);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_GT(std::set<int32_t>(ta.begin(), ta.end()).size(), 3u);
}

TEST(SamplerTest, DifferentSeedsGiveDifferentStreams) {
  const std::vector<float> logits = LogitsFromProbs({1, 1, 1, 1, 1, 1, 1, 1});
  SamplingParams p1, p2;
  p1.seed = 1;
  p2.seed = 2;
  SequenceSampler a(p1, {}, 8, 0), b(p2, {}, 8, 0);
  std::vector<int32_t> ta, tb;
  for (int i = 0; i < 32; ++i) {
    ta.push_back(a.Sample(logits).token_id);
    tb.push_back(b.Sample(logits).token_id);
  }
  EXPECT_NE(ta, tb);
}

TEST(SamplerTest, FrequenciesFollowTheDistribution) {
  SamplingParams p;
  const std::vector<float> logits = LogitsFromProbs({0.5, 0.3, 0.2});
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int s = 0; s < n; ++s) {
    SequenceSampler sampler(p, {}, 3, static_cast<uint64_t>(s));
    ++counts[sampler.Sample(logits).token_id];
  }
  EXPECT_NEAR(counts[0] / double(n), 0.5, 0.02);
  EXPECT_NEAR(counts[1] / double(n), 0.3, 0.02);
  EXPECT_NEAR(counts[2] / double(n), 0.2, 0.02);
}

TEST(SamplerTest, TopKKeepsOnlyTheKLargest) {
  SamplingParams p;
  p.top_k = 2;
  EXPECT_EQ(Support(p, LogitsFromProbs({0.1, 0.4, 0.05, 0.3, 0.15})), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  p.top_p = 0.6f;  // 0.4 alone < 0.6, 0.4 + 0.3 reaches it
  EXPECT_EQ(Support(p, LogitsFromProbs({0.1, 0.4, 0.05, 0.3, 0.15})), (std::set<int32_t>{1, 3}));
  p.top_p = 0.3f;
  EXPECT_EQ(Support(p, LogitsFromProbs({0.1, 0.4, 0.05, 0.3, 0.15})), (std::set<int32_t>{1}));
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfTheMax) {
  SamplingParams p;
  p.min_p = 0.5f;  // threshold 0.2: keeps 0.4 and 0.3
  EXPECT_EQ(Support(p, LogitsFromProbs({0.1, 0.4, 0.05, 0.3, 0.15})), (std::set<int32_t>{1, 3}));
}

TEST(SamplerTest, TemperatureSharpensTheDistribution) {
  SamplingParams p;
  p.temperature = 0.02f;  // 0.45 vs 0.35: odds e^(0.25/0.02) ~ 3e5
  EXPECT_EQ(Support(p, LogitsFromProbs({0.2, 0.45, 0.35})), (std::set<int32_t>{1}));
}

TEST(SamplerTest, LogitBiasCanForceAndForbidTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.logit_bias = {{2, 100.0f}};
  SequenceSampler s(p, {}, 3, 0);
  EXPECT_EQ(s.Sample(std::vector<float>{5.f, 1.f, 0.f}).token_id, 2);
  SamplingParams q;
  q.logit_bias = {{0, -100.0f}};
  EXPECT_EQ(Support(q, std::vector<float>{5.f, 0.f, 0.f}), (std::set<int32_t>{1, 2}));
}

TEST(SamplerTest, RepetitionPenaltyCoversPromptAndOutput) {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  // Token 0 is in the prompt: 4 -> 2 loses to token 1 (3).
  SequenceSampler s(p, std::vector<int32_t>{0}, 3, 0);
  EXPECT_EQ(s.Sample(std::vector<float>{4.f, 3.f, -1.f}).token_id, 1);
  // Now 1 is in the output too: 3 -> 1.5, and 0 -> 2 wins.
  EXPECT_EQ(s.Sample(std::vector<float>{4.f, 3.f, -1.f}).token_id, 0);
  // A negative logit is multiplied: -1 -> -2 (checked through the processed logprobs).
  SamplingParams q = p;
  q.logprobs = 0;
  q.logprobs_mode = LogprobsMode::kProcessed;
  SequenceSampler t(q, std::vector<int32_t>{2}, 3, 0);
  SampledToken tok = t.Sample(std::vector<float>{0.f, -10.f, -1.f});
  EXPECT_EQ(tok.token_id, 0);
  const double z = std::exp(0.0) + std::exp(-10.0) + std::exp(-2.0);
  EXPECT_NEAR(tok.logprob, -std::log(z), 1e-6);
}

TEST(SamplerTest, FrequencyAndPresencePenaltiesCountOutputTokens) {
  SamplingParams p;
  p.temperature = 0;
  p.frequency_penalty = 0.6f;
  p.presence_penalty = 0.5f;
  // The prompt never counts for these penalties.
  SequenceSampler s(p, std::vector<int32_t>{0, 0, 0}, 2, 0);
  const std::vector<float> logits = {2.f, 0.f};
  // Token 0's logit after n outputs of it: 2 - 0.6 n - 0.5 (n > 0): 2, 0.9, 0.3, then -0.3.
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(s.Sample(logits).token_id);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 0, 1}));
}

TEST(SamplerTest, LogprobsAreNormalisedAndTopIsSorted) {
  SamplingParams p;
  p.seed = 3;
  p.logprobs = 3;
  const std::vector<float> logits = {0.5f, 2.f, -1.f, 1.f, 0.f};
  SequenceSampler s(p, {}, 5, 0);
  SampledToken t = s.Sample(logits);
  ASSERT_EQ(t.top.size(), 3u);
  EXPECT_EQ(t.top[0].token_id, 1);
  EXPECT_EQ(t.top[1].token_id, 3);
  EXPECT_EQ(t.top[2].token_id, 0);
  std::vector<float> all(5);
  LogSoftmax(logits.data(), 5, all.data());
  double sum = 0;
  for (float lp : all) sum += std::exp(lp);
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_FLOAT_EQ(t.logprob, all[t.token_id]);
  EXPECT_FLOAT_EQ(t.top[0].logprob, all[1]);
}

TEST(SamplerTest, RawLogprobsIgnoreTemperatureProcessedDoNot) {
  const std::vector<float> logits = {1.f, 0.f};
  SamplingParams raw;
  raw.temperature = 0.5f;
  raw.logprobs = 0;
  raw.seed = 1;
  SamplingParams processed = raw;
  processed.logprobs_mode = LogprobsMode::kProcessed;
  SampledToken a = SequenceSampler(raw, {}, 2, 0).Sample(logits);
  SampledToken b = SequenceSampler(processed, {}, 2, 0).Sample(logits);
  ASSERT_EQ(a.token_id, b.token_id);
  const double la = a.token_id == 0 ? -std::log1p(std::exp(-1.0)) : -std::log1p(std::exp(1.0));
  const double lb = b.token_id == 0 ? -std::log1p(std::exp(-2.0)) : -std::log1p(std::exp(2.0));
  EXPECT_NEAR(a.logprob, la, 1e-6);
  EXPECT_NEAR(b.logprob, lb, 1e-6);
}

TEST(SamplerTest, AMaskRestrictsGreedyAndSampledDraws) {
  // 40 tokens: allowed are 3 and 37 only (two mask words).
  std::vector<float> logits(40, 0.f);
  logits[5] = 9.f;  // the unmasked argmax
  logits[37] = 2.f;
  const std::vector<uint32_t> allowed = {1u << 3, 1u << (37 - 32)};
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.logprobs = 0;
  SequenceSampler g(greedy, {}, 40, 1);
  const SampledToken t = g.Sample(logits, allowed);
  EXPECT_EQ(t.token_id, 37);
  std::vector<float> raw(40);
  LogSoftmax(logits.data(), 40, raw.data());
  EXPECT_FLOAT_EQ(t.logprob, raw[37]);  // raw logprobs ignore the mask
  EXPECT_EQ(SequenceSampler(greedy, {}, 40, 1).Sample(logits).token_id, 5);
  std::set<int32_t> seen;
  for (int s = 0; s < 200; ++s) {
    SamplingParams p;
    p.seed = static_cast<uint64_t>(s);
    seen.insert(SequenceSampler(p, {}, 40, 0).Sample(logits, allowed).token_id);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{3, 37}));
}

}  // namespace
}  // namespace moe::engine
