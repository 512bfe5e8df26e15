#include "bench/serve/serve_stats.h"

#include "absl/strings/str_cat.h"
#include "bench/serve/serve_client.h"
#include "gtest/gtest.h"

namespace moe::bench::serve {
namespace {

RequestOutcome Ok(double send, std::vector<double> chunks, double e2e, int64_t out) {
  return {.ok = true,
          .send_s = send,
          .chunk_s = std::move(chunks),
          .e2e_s = e2e,
          .prompt_tokens = 10,
          .output_tokens = out};
}

TEST(PercentileTest, InterpolatesLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 0.9), 3.7, 1e-12);
  EXPECT_NEAR(Percentile({4, 1, 3, 2}, 0.99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile({5}, 0.99), 5);
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
  EXPECT_DOUBLE_EQ(Percentile({1, 2}, 1.5), 2);  // clamped
}

TEST(SummarizeTest, VllmDefinitionsOfTtftTpotItlAndThroughput) {
  // A: sent at 0, chunks at 0.1, 0.2, 0.4, ends at 0.4, 3 tokens.
  // B: sent at 1, chunks at 0.3, 0.5, ends at 0.5 (so at 1.5), 2 tokens.
  std::vector<RequestOutcome> o = {Ok(0, {0.1, 0.2, 0.4}, 0.4, 3), Ok(1, {0.3, 0.5}, 0.5, 2)};
  const ServeSummary s = Summarize(o, Slo{});
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 0);
  EXPECT_DOUBLE_EQ(s.duration_s, 1.5);  // first send 0 -> last end 1.5
  EXPECT_DOUBLE_EQ(s.request_throughput, 2 / 1.5);
  EXPECT_DOUBLE_EQ(s.output_tok_s, 5 / 1.5);
  EXPECT_DOUBLE_EQ(s.total_tok_s, 25 / 1.5);
  EXPECT_DOUBLE_EQ(s.ttft_ms.mean, 200);
  EXPECT_NEAR(s.ttft_ms.p50, 200, 1e-9);
  // TPOT: A (0.4 - 0.1) / 2 = 150 ms; B (0.5 - 0.3) / 1 = 200 ms.
  EXPECT_NEAR(s.tpot_ms.mean, 175, 1e-9);
  // ITL pooled: 100, 200 (A), 200 (B).
  EXPECT_EQ(s.itl_ms.count, 3);
  EXPECT_NEAR(s.itl_ms.p50, 200, 1e-9);
  EXPECT_NEAR(s.itl_ms.mean, 500.0 / 3, 1e-9);
  EXPECT_NEAR(s.e2e_ms.max, 500, 1e-9);
  EXPECT_DOUBLE_EQ(s.goodput, s.request_throughput);  // no objective: every request is good
}

TEST(SummarizeTest, GoodputCountsOnlyRequestsMeetingEveryObjective) {
  std::vector<RequestOutcome> o = {
      Ok(0, {0.1, 0.2}, 0.2, 2),   // ttft 100, tpot 100: good
      Ok(0, {0.6, 0.7}, 0.7, 2),   // ttft 600: misses ttft
      Ok(0, {0.1, 0.5}, 0.5, 2),   // tpot 400: misses tpot
      Ok(0, {0.2, 0.25}, 1.0, 2),  // ttft 200, tpot 800: misses tpot
  };
  o.push_back({.ok = false, .error = "status 503", .send_s = 0, .e2e_s = 0.01});
  Slo slo;
  ASSERT_TRUE(Slo::Parse("ttft:500,tpot:150", &slo));
  const ServeSummary s = Summarize(o, slo, 2.0);
  EXPECT_EQ(s.completed, 4);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.first_error, "status 503");
  EXPECT_EQ(s.good, 1);
  EXPECT_DOUBLE_EQ(s.goodput, 0.5);
  EXPECT_DOUBLE_EQ(s.request_throughput, 2.0);
}

TEST(DecodeSpanTest, TokensAfterEachFirstOverFirstTokenToLastEnd) {
  // A: first token at 0.1, ends 1.1, 11 tokens; B: sent at 0.2, first token at 0.5, ends 1.3,
  // 5 tokens; a failed request counts for nothing.
  std::vector<RequestOutcome> run = {Ok(0, {0.1, 0.6}, 1.1, 11), Ok(0.2, {0.3}, 1.1, 5)};
  run.push_back({.ok = false, .error = "x", .send_s = 0, .e2e_s = 9, .output_tokens = 50});
  const DecodeSpan span = DecodeSpanOf(run);
  EXPECT_EQ(span.tokens, 10 + 4);
  EXPECT_DOUBLE_EQ(span.seconds, 1.3 - 0.1);
  EXPECT_DOUBLE_EQ(span.tok_s(), 14 / 1.2);
  EXPECT_EQ(DecodeSpanOf({}).tokens, 0);
  EXPECT_DOUBLE_EQ(DecodeSpanOf({}).seconds, 0);
  EXPECT_DOUBLE_EQ(DecodeSpanOf({}).tok_s(), 0);  // nothing decoded: no division by 0
}

TEST(TurnOrderTest, SystemsTakeTurnsAbba) {
  EXPECT_EQ(TurnOrder(0, 2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(TurnOrder(1, 2), (std::vector<size_t>{1, 0}));
  EXPECT_EQ(TurnOrder(2, 2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(TurnOrder(3, 3), (std::vector<size_t>{2, 1, 0}));
  EXPECT_EQ(TurnOrder(1, 1), (std::vector<size_t>{0}));
}

TEST(AppendRoundTest, RoundsAreLaidBackToBackSoTheDurationIsTheirSum) {
  std::vector<RequestOutcome> all;
  double elapsed = 0;
  AppendRound({Ok(0, {0.1}, 1.0, 4), Ok(0.5, {0.1}, 1.5, 4)}, &all, &elapsed);  // ends at 2.0
  EXPECT_DOUBLE_EQ(elapsed, 2.0);
  AppendRound({Ok(0, {0.2}, 3.0, 4)}, &all, &elapsed);
  EXPECT_DOUBLE_EQ(elapsed, 5.0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_DOUBLE_EQ(all[2].send_s, 2.0);
  EXPECT_DOUBLE_EQ(all[1].send_s, 0.5);
  // 12 tokens over the 5 s the rounds took, not over the gaps between them.
  const ServeSummary s = Summarize(all, Slo{});
  EXPECT_DOUBLE_EQ(s.duration_s, 5.0);
  EXPECT_DOUBLE_EQ(s.output_tok_s, 12 / 5.0);
}

TEST(SloTest, ParsesVllmStyleObjectives) {
  Slo s;
  ASSERT_TRUE(Slo::Parse("ttft:1000 tpot:100,e2el:9000", &s));
  EXPECT_EQ(s.ToString(), "ttft<=1000ms tpot<=100ms e2e<=9000ms");
  EXPECT_FALSE(Slo::Parse("ttft=1000", &s));
  EXPECT_FALSE(Slo::Parse("itl:5", &s));
  EXPECT_FALSE(Slo::Parse("ttft:-1", &s));
  EXPECT_EQ(Slo{}.ToString(), "none");
}

TEST(ToResultsTest, NamesFromDesignWithParamsOnEach) {
  std::vector<RequestOutcome> o = {Ok(0, {0.1, 0.2}, 0.2, 2)};
  const std::vector<BenchResult> r =
      ToResults(Summarize(o, Slo{.ttft_ms = 1000}), Slo{.ttft_ms = 1000}, {{"system", "moe"}});
  std::string names;
  for (const BenchResult& b : r) {
    absl::StrAppend(&names, b.name, " ");
    EXPECT_EQ(b.params["system"], "moe");
    EXPECT_EQ(b.params["completed"], 1);
  }
  EXPECT_EQ(names,
            "request_throughput output_tok_s total_tok_s goodput ttft_ms_mean ttft_ms_p50 "
            "ttft_ms_p90 ttft_ms_p99 tpot_ms_mean tpot_ms_p50 tpot_ms_p90 tpot_ms_p99 "
            "itl_ms_mean itl_ms_p50 itl_ms_p90 itl_ms_p99 e2e_ms_mean e2e_ms_p50 e2e_ms_p90 "
            "e2e_ms_p99 ");
  EXPECT_EQ(r[3].params["objective"], "ttft<=1000ms");
}

TEST(ServeClientTest, BodiesCarryTheTokensAndOutcomesPreferUsage) {
  ServeRequest req{
      .arrival_s = 1.5, .prompt = {20, 21}, .max_tokens = 3, .after = 0, .after_delay_s = 0.25};
  EXPECT_EQ(CompletionBody("small", req),
            "{\"model\":\"small\",\"prompt\":[20,21],\"max_tokens\":3,\"temperature\":0,"
            "\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
  const std::vector<StreamRequest> s = ToStreamRequests("small", {req});
  EXPECT_EQ(s[0].start_s, 1.5);
  EXPECT_EQ(s[0].after, 0);
  EXPECT_EQ(s[0].after_delay_s, 0.25);

  LoadResult load;
  load.streams.resize(2);
  load.streams[0] = {.status = 200,
                     .done = true,
                     .sent_s = 2,
                     .token_s = {0.1},
                     .chunk_s = {0.1, 0.2},
                     .end_s = 0.3,
                     .usage_prompt_tokens = 2,
                     .usage_completion_tokens = 3};
  load.streams[1] = {.status = 503, .error = true, .error_text = "status 503", .sent_s = 2.5};
  const std::vector<RequestOutcome> o = ToOutcomes(load, {req, req});
  EXPECT_TRUE(o[0].ok);
  EXPECT_EQ(o[0].output_tokens, 3);  // usage, not the one token counted
  EXPECT_EQ(o[0].send_s, 2);
  EXPECT_EQ(o[0].e2e_s, 0.3);
  EXPECT_FALSE(o[1].ok);
  EXPECT_EQ(o[1].error, "status 503");
  EXPECT_EQ(o[1].prompt_tokens, 2);  // no usage: the prompt's length
}

}  // namespace
}  // namespace moe::bench::serve
