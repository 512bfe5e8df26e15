#include "bench/serve/workload.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::bench::serve {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

TEST(PoissonArrivalsTest, MeanGapIsOneOverRateAndTimesAscend) {
  const std::vector<double> t = PoissonArrivals(20000, 4.0, 1.0, 7);
  ASSERT_EQ(t.size(), 20000u);
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
  EXPECT_GT(t.front(), 0);
  // 20000 exponential gaps of mean 0.25 s: the mean is within 3% (about 4 standard errors).
  EXPECT_NEAR(t.back() / 20000, 0.25, 0.25 * 0.03);
  // Poisson: the gaps' coefficient of variation is 1.
  double sum = 0, sq = 0, prev = 0;
  for (double x : t) {
    sum += x - prev;
    sq += (x - prev) * (x - prev);
    prev = x;
  }
  const double mean = sum / t.size(), var = sq / t.size() - mean * mean;
  EXPECT_NEAR(std::sqrt(var) / mean, 1.0, 0.05);
}

TEST(PoissonArrivalsTest, BurstinessChangesTheSpreadNotTheRate) {
  auto cv = [](const std::vector<double>& t) {
    double sum = 0, sq = 0, prev = 0;
    for (double x : t) {
      sum += x - prev;
      sq += (x - prev) * (x - prev);
      prev = x;
    }
    const double mean = sum / t.size();
    return std::sqrt(sq / t.size() - mean * mean) / mean;
  };
  const std::vector<double> regular = PoissonArrivals(20000, 2.0, 4.0, 3);
  const std::vector<double> bursty = PoissonArrivals(20000, 2.0, 0.25, 3);
  EXPECT_NEAR(regular.back() / 20000, 0.5, 0.5 * 0.03);
  EXPECT_NEAR(bursty.back() / 20000, 0.5, 0.5 * 0.06);
  EXPECT_NEAR(cv(regular), 0.5, 0.05);  // 1 / sqrt(4)
  EXPECT_NEAR(cv(bursty), 2.0, 0.15);   // 1 / sqrt(0.25)
}

TEST(PoissonArrivalsTest, DeterministicInSeedAndClosedLoopAtInfiniteRate) {
  EXPECT_EQ(PoissonArrivals(50, 3, 1, 9), PoissonArrivals(50, 3, 1, 9));
  EXPECT_NE(PoissonArrivals(50, 3, 1, 9), PoissonArrivals(50, 3, 1, 10));
  EXPECT_EQ(PoissonArrivals(3, 0, 1, 9), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(PoissonArrivals(2, INFINITY, 1, 9), (std::vector<double>{0, 0}));
}

TEST(RandomWorkloadTest, LengthsInRangeDistinctPromptsSharedPrefixExact) {
  auto w = RandomWorkload({.num_requests = 200,
                           .input_min = 10,
                           .input_max = 20,
                           .output_min = 3,
                           .output_max = 5,
                           .shared_prefix = 7,
                           .vocab_size = 100,
                           .seed = 1});
  ASSERT_THAT(w.status(), IsOk());
  std::set<std::vector<int32_t>> distinct;
  std::set<int32_t> lengths;
  for (const ServeRequest& r : *w) {
    ASSERT_GE(r.prompt.size(), 17u);
    ASSERT_LE(r.prompt.size(), 27u);
    lengths.insert(static_cast<int32_t>(r.prompt.size()));
    EXPECT_GE(r.max_tokens, 3);
    EXPECT_LE(r.max_tokens, 5);
    EXPECT_TRUE(std::equal(r.prompt.begin(), r.prompt.begin() + 7, (*w)[0].prompt.begin()));
    for (int32_t t : r.prompt) {
      ASSERT_GE(t, kFirstTokenId);
      ASSERT_LT(t, 100);
    }
    // Past the shared prefix, prompts differ from their first token on.
    distinct.insert(std::vector<int32_t>(r.prompt.begin() + 7, r.prompt.begin() + 9));
  }
  EXPECT_EQ(lengths.size(), 11u);  // every length in [17, 27] occurs
  EXPECT_GT(distinct.size(), 190u);
}

TEST(RandomWorkloadTest, BadRangesAreErrors) {
  EXPECT_THAT(RandomWorkload({.input_min = 5, .input_max = 4}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("input range")));
  EXPECT_THAT(RandomWorkload({.output_min = 0, .output_max = 4}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("output range")));
  EXPECT_THAT(RandomWorkload({.vocab_size = 16}).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocab_size")));
}

TEST(MultiTurnWorkloadTest, EachTurnExtendsThePreviousAndWaitsForIt) {
  auto w = MultiTurnWorkload({.num_chats = 2,
                              .turns = 3,
                              .system_tokens = 5,
                              .user_tokens = 4,
                              .output_tokens = 2,
                              .think_s = 0.5,
                              .vocab_size = 64,
                              .seed = 3});
  ASSERT_THAT(w.status(), IsOk());
  ASSERT_EQ(w->size(), 6u);
  std::string rendered;
  for (const ServeRequest& r : *w) absl::StrAppend(&rendered, r.prompt.size(), "/", r.after, " ");
  // system 5 + user 4 = 9; + answer 2 + user 4 = 15; + 6 = 21.
  EXPECT_EQ(rendered, "9/-1 15/0 21/1 9/-1 15/3 21/4 ");
  for (int k : {1, 2, 4, 5}) {
    const auto& prev = (*w)[k - 1].prompt;
    EXPECT_TRUE(std::equal(prev.begin(), prev.end(), (*w)[k].prompt.begin())) << k;
    EXPECT_EQ((*w)[k].after_delay_s, 0.5);
  }
  // Chats share the system prompt and nothing after it.
  EXPECT_TRUE(
      std::equal((*w)[0].prompt.begin(), (*w)[0].prompt.begin() + 5, (*w)[3].prompt.begin()));
  EXPECT_NE((*w)[0].prompt, (*w)[3].prompt);
}

TEST(MooncakeTraceTest, ParsesTheFormatAndRoundTrips) {
  const std::string text =
      "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 12, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 27482, \"input_length\": 6955, \"output_length\": 52, \"hash_ids\": "
      "[46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]}\n";
  auto t = ParseMooncakeTrace(text);
  ASSERT_THAT(t.status(), IsOk());
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[1].timestamp_ms, 27482);
  EXPECT_EQ((*t)[1].input_length, 6955);
  EXPECT_EQ((*t)[1].output_length, 52);
  EXPECT_EQ((*t)[1].hash_ids.size(), 14u);
  auto again = ParseMooncakeTrace(FormatMooncakeTrace(*t));
  ASSERT_THAT(again.status(), IsOk());
  EXPECT_EQ(FormatMooncakeTrace(*again), FormatMooncakeTrace(*t));
  EXPECT_EQ(FormatMooncakeTrace({(*t)[0]}),
            "{\"timestamp\":0,\"input_length\":1000,\"output_length\":12,\"hash_ids\":[0,1]}\n");
}

TEST(MooncakeTraceTest, BadLinesNameTheLine) {
  EXPECT_THAT(ParseMooncakeTrace("{\"timestamp\":0,\"input_length\":1,\"output_length\":1,"
                                 "\"hash_ids\":[1]}\nnot json\n")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: not a JSON")));
  EXPECT_THAT(ParseMooncakeTrace("{\"timestamp\":0,\"output_length\":1,\"hash_ids\":[]}").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'input_length'")));
  EXPECT_THAT(
      ParseMooncakeTrace("{\"timestamp\":0,\"input_length\":513,\"output_length\":1,"
                         "\"hash_ids\":[1]}")
          .status(),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cannot cover input_length 513")));
  EXPECT_THAT(ParseMooncakeTrace("{\"timestamp\":5,\"input_length\":1,\"output_length\":1,"
                                 "\"hash_ids\":[1]}\n{\"timestamp\":4,\"input_length\":1,"
                                 "\"output_length\":1,\"hash_ids\":[1]}")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 2: timestamp")));
  EXPECT_THAT(ParseMooncakeTrace("{\"timestamp\":0,\"input_length\":1,\"output_length\":-1,"
                                 "\"hash_ids\":[1]}")
                  .status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'output_length'")));
}

TEST(MooncakeTraceTest, EqualHashIdsBecomeEqualTokensAndPrefixesShareExactly) {
  std::vector<TraceEntry> trace = {
      {.timestamp_ms = 0, .input_length = 20, .output_length = 3, .hash_ids = {7, 8, 9}},
      {.timestamp_ms = 1500, .input_length = 14, .output_length = 900, .hash_ids = {7, 5}},
  };
  auto r = TraceToRequests(
      trace, {.block_tokens = 8, .time_scale = 2, .max_output = 100, .vocab_size = 50, .seed = 4});
  ASSERT_THAT(r.status(), IsOk());
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].prompt.size(), 20u);
  EXPECT_EQ((*r)[1].prompt.size(), 14u);
  EXPECT_DOUBLE_EQ((*r)[1].arrival_s, 3.0);
  EXPECT_EQ((*r)[1].max_tokens, 100);
  // Block 7 is the first 8 tokens of both; block 8 vs block 5 differ.
  EXPECT_TRUE(
      std::equal((*r)[0].prompt.begin(), (*r)[0].prompt.begin() + 8, (*r)[1].prompt.begin()));
  EXPECT_NE(std::vector<int32_t>((*r)[0].prompt.begin() + 8, (*r)[0].prompt.begin() + 14),
            std::vector<int32_t>((*r)[1].prompt.begin() + 8, (*r)[1].prompt.end()));
}

TEST(SyntheticTraceTest, SharesPrefixBlocksAndParsesBack) {
  auto t = SyntheticTrace({.num_requests = 400,
                           .rate = 10,
                           .num_prefixes = 3,
                           .prefix_blocks = 2,
                           .prefix_share = 0.5,
                           .input_min = 1024,
                           .input_max = 3000,
                           .output_min = 1,
                           .output_max = 9,
                           .seed = 5});
  ASSERT_THAT(t.status(), IsOk());
  int shared = 0, first_prefix = 0;
  std::set<int64_t> unique_ids;
  for (const TraceEntry& e : *t) {
    EXPECT_GE(e.input_length, 1024);
    EXPECT_LE(e.input_length, 3000);
    EXPECT_EQ(static_cast<int64_t>(e.hash_ids.size()), (e.input_length + 511) / 512);
    if (e.hash_ids[0] < 6) {
      ++shared;
      EXPECT_EQ(e.hash_ids[1], e.hash_ids[0] + 1);  // a prefix's two blocks, in order
      if (e.hash_ids[0] == 0) ++first_prefix;
    }
    for (size_t b = (e.hash_ids[0] < 6 ? 2 : 0); b < e.hash_ids.size(); ++b) {
      EXPECT_TRUE(unique_ids.insert(e.hash_ids[b]).second) << "unique block reused";
    }
  }
  EXPECT_NEAR(shared / 400.0, 0.5, 0.1);
  EXPECT_GT(first_prefix, shared / 3);  // Zipf-like: the first prefix is the most popular
  EXPECT_NEAR(t->back().timestamp_ms / 400.0, 100, 20);  // 10 req/s
  auto parsed = ParseMooncakeTrace(FormatMooncakeTrace(*t));
  ASSERT_THAT(parsed.status(), IsOk());
  EXPECT_EQ(parsed->size(), 400u);
}

}  // namespace
}  // namespace moe::bench::serve
