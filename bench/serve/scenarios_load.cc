// `moe bench serve`'s side-by-side scenarios (serve_kit.h): the load scenarios: 16 concurrent
// streams, a repeated 2k-token prefix warm vs cold, a Poisson rate sweep.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/common/suite.h"
#include "bench/engine/engine_bench.h"
#include "bench/serve/expert_load.h"
#include "bench/serve/serve_kit.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/child_process.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {

namespace fs = std::filesystem;

// 16 concurrent streams of distinct short prompts, 128 output tokens each (closed loop: a
// finished stream's place goes to the next request), in two rounds that the two systems take in
// turns, A B then B A (MeasureInTurns), 64 requests each (quick: 16, one wave).
absl::Status Concurrency16(Ctx& ctx, Systems& sys) {
  const int rounds = 2;
  const int per_round = ctx.options.quick ? 16 : 64;
  ASSIGN_OR_RETURN(
      std::vector<TurnsMeasured> m,
      MeasureInTurns(ctx, sys.Both(), rounds, "c16",
                     [&](int round) { return ShortPrompts(ctx, per_round, 128, 128, 16 + round); },
                     {.max_concurrency = 16, .timeout_s = 600},
                     {{"prompt_tokens", "16-64"}, {"output_tokens", 128}}));
  std::optional<double> theirs;
  if (m.size() > 1) theirs = m[1].decode_tok_s;
  AddCompared(ctx, "serve_decode_tok_s_c16", m[0].decode_tok_s, theirs, "tok/s",
              {{"streams", 16},
               {"requests", per_round * rounds},
               {"rounds", rounds},
               {"order", kTurnsOrder},
               {"output_tokens", 128},
               {"llama_server", "-t 2 -np 16 -c 131072"},
               {"method",
                "output tokens after each first token / first token to last end, summed over "
                "the rounds"},
               {"goal", "ratio >= 2.5"}});
  return absl::OkStatus();
}

// TTFT of a repeated 2k-token document with a new question, warm over cold (sequential).
absl::Status PrefixWarmCold(Ctx& ctx, Systems& sys) {
  const int reps = ctx.options.quick ? 2 : 3;
  const int32_t doc_tokens = 2048, question_tokens = 32;
  std::map<RunningServer*, std::pair<double, double>> medians;  // cold, warm ms
  std::map<RunningServer*, std::vector<double>> cold, warm;
  // The systems take turns, rep by rep (TurnOrder, as MeasureInTurns).
  const std::vector<RunningServer*> both = sys.Both();
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t k : TurnOrder(rep, both.size())) {
      RunningServer* s = both[k];
      // Distinct documents per rep and per system run, so every "cold" is cold.
      ASSIGN_OR_RETURN(auto doc, RandomWorkload({.num_requests = 1,
                                                 .input_min = doc_tokens,
                                                 .input_max = doc_tokens,
                                                 .output_min = 4,
                                                 .output_max = 4,
                                                 .vocab_size = ctx.vocab_size,
                                                 .seed = 1000u + rep}));
      ASSIGN_OR_RETURN(auto questions, RandomWorkload({.num_requests = 2,
                                                       .input_min = question_tokens,
                                                       .input_max = question_tokens,
                                                       .output_min = 4,
                                                       .output_max = 4,
                                                       .vocab_size = ctx.vocab_size,
                                                       .seed = 2000u + rep}));
      std::vector<ServeRequest> pair(2);
      for (int k = 0; k < 2; ++k) {
        pair[k].prompt = doc[0].prompt;
        pair[k].prompt.insert(pair[k].prompt.end(), questions[k].prompt.begin(),
                              questions[k].prompt.end());
        pair[k].max_tokens = 4;
      }
      pair[1].after = 0;  // warm after cold has finished
      SettleCpu();        // not in the other system's spinning threads (servers.h)
      std::vector<RequestOutcome> out =
          RunWorkload(s->port, s->model, pair, {.max_concurrency = 1, .timeout_s = 300});
      if (!out[0].ok || !out[1].ok || out[0].chunk_s.empty() || out[1].chunk_s.empty()) {
        return absl::InternalError(absl::StrCat("prefix scenario on ", s->system, ": ",
                                                out[0].ok ? out[1].error : out[0].error));
      }
      cold[s].push_back(out[0].chunk_s.front() * 1e3);
      warm[s].push_back(out[1].chunk_s.front() * 1e3);
    }
  }
  for (RunningServer* s : sys.Both()) {
    medians[s] = {Percentile(cold[s], 0.5), Percentile(warm[s], 0.5)};
    Progress(absl::StrCat("prefix on ", s->system, ": cold ", medians[s].first, " ms, warm ",
                          medians[s].second, " ms"));
  }
  auto ratio = [&](RunningServer* s) { return medians[s].second / medians[s].first; };
  std::optional<double> theirs;
  nlohmann::json params = {{"prefix_tokens", doc_tokens},
                           {"question_tokens", question_tokens},
                           {"repeats", reps},
                           {"order", kTurnsOrder},
                           {"ours_ttft_cold_ms", medians[sys.ours].first},
                           {"ours_ttft_warm_ms", medians[sys.ours].second},
                           {"goal", "<= 0.05, and ratio to llama-server's <= 0.5"}};
  if (sys.theirs) {
    theirs = ratio(sys.theirs);
    params["llama_ttft_cold_ms"] = medians[sys.theirs].first;
    params["llama_ttft_warm_ms"] = medians[sys.theirs].second;
    params["llama_server"] = "prompt cache on (cache_prompt, its default), -np 16";
  }
  AddCompared(ctx, "serve_ttft_warm_over_cold", ratio(sys.ours), theirs, "ratio", params);
  return absl::OkStatus();
}

// Poisson arrivals at rising rates: throughput and latency vs offered load, and the highest
// rate with p90 TTFT <= 1 s for each system. A system that still meets the objective at the
// list's top rate goes on doubling (up to 64x the top) until it fails, so that neither figure is
// capped by the rates offered; each rate runs `seconds` of arrivals (at most 4000 requests, quick
// 2000), so an overloaded system's queue has time to show: a cap that cut a high rate's run to a
// burst of under a second let a system pass rates it cannot sustain.
absl::Status RateSweep(Ctx& ctx, Systems& sys) {
  const double seconds = ctx.options.quick ? 4 : 10;
  const std::vector<double> rates = ctx.options.quick
                                        ? std::vector<double>{2, 4, 8, 16, 32, 64}
                                        : std::vector<double>{1, 2, 4, 8, 16, 32, 64, 128};
  const Keep keep = {"request_throughput", "output_tok_s", "ttft_ms_p50", "ttft_ms_p90",
                     "ttft_ms_p99",        "itl_ms_p50",   "itl_ms_p99",  "goodput"};
  std::map<RunningServer*, double> best;
  std::map<RunningServer*, bool> capped;  // never failed, even at 64x the top rate
  for (RunningServer* s : sys.Both()) {
    std::map<double, std::string> rows;  // by rate, for the plot's lines
    auto point = [&](double rate) -> absl::StatusOr<bool> {
      const int n = std::clamp(static_cast<int>(std::lround(rate * seconds)),
                               ctx.options.quick ? 8 : 12, ctx.options.quick ? 2000 : 4000);
      ASSIGN_OR_RETURN(auto reqs, ShortPrompts(ctx, n, 32, 64, 7));
      const std::vector<double> at = PoissonArrivals(n, rate, 1, 11);
      for (int i = 0; i < n; ++i) reqs[i].arrival_s = at[i];
      Measured m = Measure(ctx, *s, "sweep", reqs, {.max_concurrency = 0, .timeout_s = 600},
                           {{"rate", rate}, {"arrivals", "poisson"}, {"output_tokens", "32-64"}},
                           keep, absl::StrCat("sweep-r", rate));
      const ServeSummary& x = m.summary;
      absl::StrAppend(&rows[rate], rate, " ", x.request_throughput, " ", x.output_tok_s, " ",
                      x.ttft_ms.p50, " ", x.ttft_ms.p90, " ", x.ttft_ms.p99, " ", x.itl_ms.p50, " ",
                      x.itl_ms.p99, "\n");
      return x.failed == 0 && x.ttft_ms.p90 <= 1000;
    };
    double pass = 0, fail = 0;
    for (double rate : rates) {
      ASSIGN_OR_RETURN(bool ok, point(rate));
      if (!ok) {
        fail = rate;
        break;
      }
      pass = rate;
    }
    for (double rate = rates.back() * 2; fail == 0 && rate <= rates.back() * 64; rate *= 2) {
      ASSIGN_OR_RETURN(bool ok, point(rate));
      if (ok) {
        pass = rate;
      } else {
        fail = rate;
      }
    }
    if (fail == 0) capped[s] = true;
    // Failing at the lowest rate: halve down to a floor, so a slow system still gets a figure.
    const double floor = ctx.options.quick ? rates.front() / 4 : rates.front() / 16;
    for (double rate = rates.front() / 2; pass == 0 && rate >= floor; rate /= 2) {
      ASSIGN_OR_RETURN(bool ok, point(rate));
      if (ok) {
        pass = rate;
      } else {
        fail = rate;
      }
    }
    if (fail > 0 && pass > 0) {  // one refinement between the last pass and the first fail
      const double mid = (pass + fail) / 2;
      ASSIGN_OR_RETURN(bool ok, point(mid));
      if (ok) pass = mid;
    }
    best[s] = pass;
    std::string table = "# rate req_s out_tok_s ttft_p50 ttft_p90 ttft_p99 itl_p50 itl_p99\n";
    for (const auto& [rate, row] : rows) table += row;
    if (!ctx.options.artifacts_dir.empty()) {
      WriteFile(
          (fs::path(ctx.options.artifacts_dir) / ("serve-sweep-" + s->system + ".dat")).string(),
          table);
    }
  }
  std::optional<double> theirs;
  if (sys.theirs) theirs = best[sys.theirs];
  nlohmann::json params = {
      {"objective", "p90 TTFT <= 1 s, no failed request"},
      {"prompt_tokens", "16-64"},
      {"output_tokens", "32-64"},
      {"seconds_per_rate", seconds},
      {"rates", rates},
      {"method",
       "doubling until the objective fails (past the list's top too, up to 64x it), then one "
       "midpoint; halving from the lowest rate when that fails already (0: not met even at the "
       "floor)"}};
  // A figure that never failed is only a lower bound: say so rather than pass it off as a rate.
  if (capped[sys.ours]) params["ours_capped_by_the_rates"] = true;
  if (sys.theirs && capped[sys.theirs]) params["llama_capped_by_the_rates"] = true;
  AddCompared(ctx, "serve_max_rate_p90_ttft_1s", best[sys.ours], theirs, "req/s", params);
  return absl::OkStatus();
}

}  // namespace moe::bench::serve
