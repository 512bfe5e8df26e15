// `moe bench serve`: the serving system measured the way its users judge it, through the
// gateway's OpenAI API under load (workload.h, serve_stats.h, bench/common/sse_load.h).
//
// Two modes:
//   moe bench serve --url http://127.0.0.1:PORT [--workload random|shared-prefix|multi-turn|trace]
//       [--rate R | --rates R1,R2,... | --concurrency C] [--num-requests N] ...
//     drives a running server (ours or any OpenAI-compatible one on loopback) with one workload
//     and reports what `vllm bench serve` reports plus goodput (--goodput ttft:MS,tpot:MS).
//   moe bench serve [--preset small | --model DIR] [--quick]
//     the side-by-side run: our cluster (`moe up`) and llama-server (-t 2 -np 16 -c 131072) on
//     the same checkpoint (`moe export-gguf`), same load, in one run, as ratios; then embedded
//     vs disaggregated. The scenarios are kScenarios below: one entry each.
//   moe bench serve --make-trace FILE [--num-requests N --rate R ...]
//     writes a synthetic Mooncake-format trace.
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
#include "bench/serve/serve_client.h"
#include "bench/serve/serve_stats.h"
#include "bench/serve/servers.h"
#include "bench/serve/workload.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/child_process.h"
#include "nlohmann/json.hpp"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

namespace moe::bench::serve {
namespace {

namespace fs = std::filesystem;

void Progress(const std::string& msg) {
  std::fprintf(stderr, "moe bench serve: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

// --- the suite's own flags ---

class Flags {
 public:
  explicit Flags(const std::map<std::string, std::string>& f) : f_(f) {}
  std::string Str(const std::string& k, const std::string& def) const {
    auto it = f_.find(k);
    return it == f_.end() ? def : it->second;
  }
  absl::StatusOr<double> Num(const std::string& k, double def) const {
    auto it = f_.find(k);
    if (it == f_.end()) return def;
    double v = 0;
    if (!absl::SimpleAtod(it->second, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", k, ": not a number: ", it->second));
    }
    return v;
  }
  absl::StatusOr<int> Int(const std::string& k, int def) const {
    ASSIGN_OR_RETURN(double v, Num(k, def));
    if (v != std::floor(v)) return absl::InvalidArgumentError(absl::StrCat("--", k, ": integer"));
    return static_cast<int>(v);
  }
  // "N" or "MIN:MAX".
  absl::Status Range(const std::string& k, int32_t* lo, int32_t* hi) const {
    auto it = f_.find(k);
    if (it == f_.end()) return absl::OkStatus();
    std::vector<std::string> parts = absl::StrSplit(it->second, ':');
    int a = 0, b = 0;
    if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &a)) {
      *lo = *hi = a;
    } else if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &a) &&
               absl::SimpleAtoi(parts[1], &b)) {
      *lo = a;
      *hi = b;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", k, ": N or MIN:MAX, got ", it->second));
    }
    return absl::OkStatus();
  }
  bool Has(const std::string& k) const { return f_.count(k) > 0; }

 private:
  const std::map<std::string, std::string>& f_;
};

// --- measuring one workload on one server ---

struct Ctx {
  const SuiteOptions& options;
  BenchReport& report;
  Slo slo;
  int32_t vocab_size = 1024;
  std::string moe;        // the `moe` CLI (scenarios that start their own cluster)
  std::string model_dir;  // the checkpoint both systems serve
  std::string work;       // config files and logs
};

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

// Router-side KV usage and the prefix-cache counters of every tier (L1: the router's pool; L2,
// L3: the kv-store, as the router counts its lookups there), sampled every `period` while a run
// goes on.
class KvSampler {
 public:
  KvSampler(std::vector<int> ports, absl::Duration period)
      : ports_(std::move(ports)), period_(period) {
    if (ports_.empty()) return;
    start_ = absl::Now();
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        Sample();
        absl::SleepFor(period_);
      }
      Sample();
    });
  }
  ~KvSampler() { Stop(); }
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // "t_s kv_usage hit_rate_window hits queries", one sample per line.
  std::string Table() const {
    std::string out = "# t_s kv_usage_l1 prefix_hit_rate_l1_window hits_total queries_total\n";
    for (size_t i = 0; i < rows_.size(); ++i) {
      const Row& r = rows_[i];
      // NaN (a gap in the plot) for a window without lookups.
      std::string window = "NaN";
      if (i > 0 && r.queries > rows_[i - 1].queries) {
        window = absl::StrCat((r.hits - rows_[i - 1].hits) / (r.queries - rows_[i - 1].queries));
      }
      absl::StrAppend(&out, r.t, " ", r.usage, " ", window, " ", r.hits, " ", r.queries, "\n");
    }
    return out;
  }
  // "t_s rate_l1 rate_l2 rate_l3 (cumulative since the first sample; NaN before a tier's first
  // lookup) hits_l1 queries_l1 hits_l2 ...", one sample per line.
  std::string TierTable() const {
    std::string out =
        "# t_s hit_rate_l1 hit_rate_l2 hit_rate_l3 (cumulative) hits_l1 queries_l1 hits_l2 "
        "queries_l2 hits_l3 queries_l3\n";
    for (const Row& r : rows_) {
      absl::StrAppend(&out, r.t);
      for (int t = 0; t < kTiers; ++t) {
        const double q = r.tier_queries[t] - rows_.front().tier_queries[t];
        const double h = r.tier_hits[t] - rows_.front().tier_hits[t];
        absl::StrAppend(&out, " ", q > 0 ? absl::StrCat(h / q) : "NaN");
      }
      for (int t = 0; t < kTiers; ++t) {
        absl::StrAppend(&out, " ", r.tier_hits[t], " ", r.tier_queries[t]);
      }
      out += "\n";
    }
    return out;
  }
  // Hits / queries of tier `t` (0 = L1) over the run.
  double HitRate(int t = 0) const {
    if (rows_.size() < 2) return 0;
    const double q = rows_.back().tier_queries[t] - rows_.front().tier_queries[t];
    return q > 0 ? (rows_.back().tier_hits[t] - rows_.front().tier_hits[t]) / q : 0;
  }
  double Queries(int t) const {
    return rows_.size() < 2 ? 0 : rows_.back().tier_queries[t] - rows_.front().tier_queries[t];
  }
  double PeakUsage() const {
    double peak = 0;
    for (const Row& r : rows_) peak = std::max(peak, r.usage);
    return peak;
  }

 private:
  static constexpr int kTiers = 3;
  struct Row {
    double t = 0, usage = 0, hits = 0, queries = 0;  // L1
    double tier_hits[kTiers] = {0, 0, 0}, tier_queries[kTiers] = {0, 0, 0};
  };
  void Sample() {
    Row row{.t = absl::ToDoubleSeconds(absl::Now() - start_)};
    for (int port : ports_) {
      auto r = common::http::HttpCall(port, "GET", "/metrics");
      if (!r || r->status != 200) return;
      row.usage = std::max(row.usage,
                           ScrapeValue(r->body, "moe_kv_usage_ratio", "tier=\"l1\"").value_or(0));
      for (int t = 0; t < kTiers; ++t) {
        const std::string tier = absl::StrCat("tier=\"l", t + 1, "\"");
        row.tier_hits[t] += ScrapeValue(r->body, "moe_prefix_cache_hits_total", tier).value_or(0);
        row.tier_queries[t] +=
            ScrapeValue(r->body, "moe_prefix_cache_queries_total", tier).value_or(0);
      }
    }
    row.hits = row.tier_hits[0];
    row.queries = row.tier_queries[0];
    rows_.push_back(row);  // only this thread writes until Stop() joins it
  }
  std::vector<int> ports_;
  absl::Duration period_;
  absl::Time start_;
  std::atomic<bool> stop_{false};
  std::vector<Row> rows_;
  std::thread thread_;
};

struct Measured {
  ServeSummary summary;
  std::vector<RequestOutcome> outcomes;
};

// Which of ToResults' figures a scenario keeps (all when empty).
using Keep = std::vector<std::string>;

Measured Measure(Ctx& ctx, RunningServer& server, const std::string& scenario,
                 const std::vector<ServeRequest>& requests, const LoadOptions& load,
                 nlohmann::json params, const Keep& keep = {}, const std::string& tag = "") {
  Measured m;
  m.outcomes = RunWorkload(server.port, server.model, requests, load);
  m.summary = Summarize(m.outcomes, ctx.slo);
  params["scenario"] = scenario;
  params["system"] = server.system;
  params["requests"] = requests.size();
  if (load.max_concurrency > 0) params["concurrency"] = load.max_concurrency;
  for (BenchResult& r : ToResults(m.summary, ctx.slo, params)) {
    if (keep.empty() || std::find(keep.begin(), keep.end(), r.name) != keep.end()) {
      ctx.report.Add(std::move(r));
    }
  }
  if (!ctx.options.artifacts_dir.empty()) {
    const std::string base =
        (fs::path(ctx.options.artifacts_dir) /
         absl::StrCat("serve-", tag.empty() ? scenario : tag, "-", server.system))
            .string();
    WriteFile(base + ".requests.dat", OutcomeTable(m.outcomes));
    // Sorted samples, one per line: the plots draw them as CDFs.
    std::vector<double> ttft, itl;
    for (const RequestOutcome& o : m.outcomes) {
      if (o.ok && !o.chunk_s.empty()) ttft.push_back(o.chunk_s.front() * 1e3);
      for (size_t i = 1; i < o.chunk_s.size(); ++i) {
        itl.push_back((o.chunk_s[i] - o.chunk_s[i - 1]) * 1e3);
      }
    }
    auto lines = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      std::string out;
      for (double x : v) absl::StrAppend(&out, x, "\n");
      return out;
    };
    WriteFile(base + ".ttft.dat", lines(std::move(ttft)));
    WriteFile(base + ".itl.dat", lines(std::move(itl)));
  }
  Progress(
      absl::StrCat(scenario, " on ", server.system, ": ", m.summary.completed, " ok, ",
                   m.summary.failed, " failed, ", absl::SixDigits(m.summary.output_tok_s),
                   " out tok/s, ttft p90 ", absl::SixDigits(m.summary.ttft_ms.p90), " ms",
                   m.summary.first_error.empty() ? "" : ", first error: ", m.summary.first_error));
  return m;
}

// Output tokens after each request's first, over first-token-to-last-end: the rate at which
// the system decodes while all streams run.
double DecodeTokS(const std::vector<RequestOutcome>& outcomes) {
  double first = 1e18, last = 0;
  int64_t tokens = 0;
  for (const RequestOutcome& o : outcomes) {
    if (!o.ok || o.chunk_s.empty()) continue;
    first = std::min(first, o.send_s + o.chunk_s.front());
    last = std::max(last, o.send_s + o.e2e_s);
    tokens += std::max<int64_t>(0, o.output_tokens - 1);
  }
  return last > first ? tokens / (last - first) : 0;
}

void AddCompared(Ctx& ctx, const std::string& name, double ours, std::optional<double> theirs,
                 const std::string& unit, nlohmann::json params) {
  BenchResult r{.name = name, .value = ours, .unit = unit, .params = std::move(params)};
  if (theirs && *theirs > 0) r.baseline = Baseline{"llama-server", *theirs};
  ctx.report.Add(std::move(r));
}

absl::StatusOr<std::vector<ServeRequest>> ShortPrompts(const Ctx& ctx, int n, int32_t out_min,
                                                       int32_t out_max, uint64_t seed) {
  return RandomWorkload({.num_requests = n,
                         .input_min = 16,
                         .input_max = 64,
                         .output_min = out_min,
                         .output_max = out_max,
                         .vocab_size = ctx.vocab_size,
                         .seed = seed});
}

// --- the scenarios of the side-by-side run (one entry each) ---

struct Systems {
  RunningServer* ours = nullptr;
  RunningServer* theirs = nullptr;  // null when llama-server is not available
  std::vector<RunningServer*> Both() const {
    std::vector<RunningServer*> v = {ours};
    if (theirs) v.push_back(theirs);
    return v;
  }
};

// 16 concurrent streams of distinct short prompts, 128 output tokens each (closed loop).
absl::Status Concurrency16(Ctx& ctx, Systems& sys) {
  const int waves = ctx.options.quick ? 1 : 4;
  std::optional<double> theirs;
  double ours = 0;
  for (RunningServer* s : sys.Both()) {
    ASSIGN_OR_RETURN(auto reqs, ShortPrompts(ctx, 16 * waves, 128, 128, 16));
    Measured m = Measure(ctx, *s, "c16", reqs, {.max_concurrency = 16, .timeout_s = 600},
                         {{"prompt_tokens", "16-64"}, {"output_tokens", 128}});
    (s == sys.ours ? ours : theirs.emplace()) = DecodeTokS(m.outcomes);
  }
  AddCompared(ctx, "serve_decode_tok_s_c16", ours, theirs, "tok/s",
              {{"streams", 16},
               {"requests", 16 * waves},
               {"output_tokens", 128},
               {"llama_server", "-t 2 -np 16 -c 131072"},
               {"method", "output tokens after each first token / first token to last end"},
               {"goal", "ratio >= 2.5"}});
  return absl::OkStatus();
}

// TTFT of a repeated 2k-token document with a new question, warm over cold (sequential).
absl::Status PrefixWarmCold(Ctx& ctx, Systems& sys) {
  const int reps = ctx.options.quick ? 2 : 3;
  const int32_t doc_tokens = 2048, question_tokens = 32;
  std::map<RunningServer*, std::pair<double, double>> medians;  // cold, warm ms
  for (RunningServer* s : sys.Both()) {
    std::vector<double> cold, warm;
    for (int rep = 0; rep < reps; ++rep) {
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
      std::vector<RequestOutcome> out =
          RunWorkload(s->port, s->model, pair, {.max_concurrency = 1, .timeout_s = 300});
      if (!out[0].ok || !out[1].ok || out[0].chunk_s.empty() || out[1].chunk_s.empty()) {
        return absl::InternalError(absl::StrCat("prefix scenario on ", s->system, ": ",
                                                out[0].ok ? out[1].error : out[0].error));
      }
      cold.push_back(out[0].chunk_s.front() * 1e3);
      warm.push_back(out[1].chunk_s.front() * 1e3);
    }
    medians[s] = {Percentile(cold, 0.5), Percentile(warm, 0.5)};
    Progress(absl::StrCat("prefix on ", s->system, ": cold ", medians[s].first, " ms, warm ",
                          medians[s].second, " ms"));
  }
  auto ratio = [&](RunningServer* s) { return medians[s].second / medians[s].first; };
  std::optional<double> theirs;
  nlohmann::json params = {{"prefix_tokens", doc_tokens},
                           {"question_tokens", question_tokens},
                           {"repeats", reps},
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
// rate with p90 TTFT <= 1 s for each system.
absl::Status RateSweep(Ctx& ctx, Systems& sys) {
  const double seconds = ctx.options.quick ? 4 : 10;
  const std::vector<double> rates = ctx.options.quick
                                        ? std::vector<double>{2, 4, 8, 16, 32, 64}
                                        : std::vector<double>{1, 2, 4, 8, 16, 32, 64, 128};
  const Keep keep = {"request_throughput", "output_tok_s", "ttft_ms_p50", "ttft_ms_p90",
                     "ttft_ms_p99",        "itl_ms_p50",   "itl_ms_p99",  "goodput"};
  std::map<RunningServer*, double> best;
  for (RunningServer* s : sys.Both()) {
    std::map<double, std::string> rows;  // by rate, for the plot's lines
    auto point = [&](double rate) -> absl::StatusOr<bool> {
      const int n = std::clamp(static_cast<int>(std::lround(rate * seconds)),
                               ctx.options.quick ? 8 : 12, 400);
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
  AddCompared(ctx, "serve_max_rate_p90_ttft_1s", best[sys.ours], theirs, "req/s",
              {{"objective", "p90 TTFT <= 1 s, no failed request"},
               {"prompt_tokens", "16-64"},
               {"output_tokens", "32-64"},
               {"seconds_per_rate", seconds},
               {"rates", rates},
               {"method",
                "doubling until the objective fails, then one midpoint; halving from the lowest "
                "rate when that fails already (0: not met even at the floor)"}});
  return absl::OkStatus();
}

// One shared 1k-token system prompt; multi-turn chats; a synthetic Mooncake trace. Router KV
// usage and L1 prefix hit rate are sampled during our runs.
absl::Status SharedPrefixWorkloads(Ctx& ctx, Systems& sys) {
  const int n = ctx.options.quick ? 16 : 48;
  ASSIGN_OR_RETURN(auto shared, RandomWorkload({.num_requests = n,
                                                .input_min = 32,
                                                .input_max = 128,
                                                .output_min = 32,
                                                .output_max = 32,
                                                .shared_prefix = 1024,
                                                .vocab_size = ctx.vocab_size,
                                                .seed = 31}));
  const std::vector<double> at = PoissonArrivals(n, 4, 1, 32);
  for (int i = 0; i < n; ++i) shared[i].arrival_s = at[i];
  ASSIGN_OR_RETURN(auto chats, MultiTurnWorkload({.num_chats = ctx.options.quick ? 4 : 8,
                                                  .turns = 4,
                                                  .system_tokens = 512,
                                                  .user_tokens = 64,
                                                  .output_tokens = 32,
                                                  .vocab_size = ctx.vocab_size,
                                                  .seed = 33}));
  ASSIGN_OR_RETURN(auto trace, SyntheticTrace({.num_requests = ctx.options.quick ? 16 : 48,
                                               .rate = 4,
                                               .num_prefixes = 4,
                                               .prefix_blocks = 2,
                                               .input_min = 256,
                                               .input_max = 2048,
                                               .output_min = 16,
                                               .output_max = 64,
                                               .seed = 34}));
  ASSIGN_OR_RETURN(auto replay, TraceToRequests(trace, {.vocab_size = ctx.vocab_size, .seed = 35}));
  if (!ctx.options.artifacts_dir.empty()) {
    WriteFile((fs::path(ctx.options.artifacts_dir) / "serve-synthetic-trace.jsonl").string(),
              FormatMooncakeTrace(trace));
  }
  const Keep keep = {"request_throughput", "output_tok_s", "ttft_ms_p50", "ttft_ms_p90",
                     "tpot_ms_p50",        "itl_ms_p50",   "e2e_ms_p90",  "goodput"};
  struct Load {
    const char* name;
    const std::vector<ServeRequest>* requests;
    LoadOptions load;
    nlohmann::json params;
  };
  const std::vector<Load> loads = {
      {"shared-prefix",
       &shared,
       {.max_concurrency = 0, .timeout_s = 600},
       {{"system_tokens", 1024}, {"unique_tokens", "32-128"}, {"rate", 4}}},
      {"multi-turn",
       &chats,
       {.max_concurrency = 0, .timeout_s = 600},
       {{"chats", ctx.options.quick ? 4 : 8}, {"turns", 4}, {"system_tokens", 512}}},
      {"trace",
       &replay,
       {.max_concurrency = 0, .timeout_s = 600},
       {{"trace", "synthetic Mooncake format"}, {"rate", 4}, {"block_tokens", kTraceBlockTokens}}},
  };
  // --quick runs these on our cluster only (llama-server's share of a quick run is the three
  // Must-show figures).
  const std::vector<RunningServer*> systems =
      ctx.options.quick ? std::vector<RunningServer*>{sys.ours} : sys.Both();
  for (const Load& l : loads) {
    for (RunningServer* s : systems) {
      KvSampler sampler(s == sys.ours ? s->router_metrics_ports : std::vector<int>{},
                        absl::Milliseconds(200));
      nlohmann::json params = l.params;
      Measured m = Measure(ctx, *s, l.name, *l.requests, l.load, params, keep);
      sampler.Stop();
      if (s == sys.ours && !s->router_metrics_ports.empty()) {
        ctx.report.Add({.name = "serve_prefix_hit_rate_l1",
                        .value = sampler.HitRate(),
                        .unit = "ratio",
                        .params = {{"scenario", l.name},
                                   {"system", s->system},
                                   {"peak_kv_usage_l1", sampler.PeakUsage()},
                                   {"method",
                                    "moe_prefix_cache_hits_total / queries_total "
                                    "{tier=l1} over the run (router /metrics)"}}});
        if (!ctx.options.artifacts_dir.empty()) {
          WriteFile(
              (fs::path(ctx.options.artifacts_dir) / absl::StrCat("serve-kv-", l.name, ".dat"))
                  .string(),
              sampler.Table());
        }
      }
    }
  }
  return absl::OkStatus();
}

// Documents revisited with L1 and L2 too small to hold them all, on a cluster of its own: the
// router's L1 pool is 96 blocks (16 tokens each: about two 512-token documents besides the one
// running), the kv-store's L2 10 MiB (about five), L3 in a fresh directory (all twelve). The 12
// documents are first read once in turn (cold), then each request picks one by its recency rank
// (LRU stack distance): 0-1 mostly hits L1, 2-4 L2, 5-11 L3. Each request is a document + a new
// 16-token question, 8 output tokens, one at a time. The tier hit rates come from the router's
// moe_prefix_cache_{hits,queries}_total{tier} (a tier's queries are the lookups that missed
// every tier above it).
absl::Status KvTiers(Ctx& ctx, Systems&) {
  constexpr int kDocs = 12, kDocTokens = 512, kL1Blocks = 96;
  constexpr int64_t kL2Bytes = 10 << 20;
  const int revisits = ctx.options.quick ? 24 : 60;
  ASSIGN_OR_RETURN(auto docs, RandomWorkload({.num_requests = kDocs,
                                              .input_min = kDocTokens,
                                              .input_max = kDocTokens,
                                              .output_min = 8,
                                              .output_max = 8,
                                              .vocab_size = ctx.vocab_size,
                                              .seed = 41}));
  ASSIGN_OR_RETURN(auto questions, RandomWorkload({.num_requests = kDocs + revisits,
                                                   .input_min = 16,
                                                   .input_max = 16,
                                                   .output_min = 8,
                                                   .output_max = 8,
                                                   .vocab_size = ctx.vocab_size,
                                                   .seed = 42}));
  std::vector<int> recency;  // doc ids, most recent first
  std::vector<int> order;
  for (int d = 0; d < kDocs; ++d) order.push_back(d);
  // Stack distances in a fixed, seeded order: a third each for L1, L2 and L3 ranges.
  std::mt19937 rng(43);
  for (int i = 0; i < revisits; ++i) {
    const int band = i % 3;
    const int lo = band == 0 ? 0 : band == 1 ? 2 : 5, hi = band == 0 ? 1 : band == 1 ? 4 : 11;
    order.push_back(-1 - std::uniform_int_distribution<int>(lo, hi)(rng));  // a distance
  }
  std::shuffle(order.begin() + kDocs, order.end(), rng);
  std::vector<ServeRequest> requests;
  for (size_t i = 0; i < order.size(); ++i) {
    int doc = order[i];
    if (doc < 0) doc = recency[std::min<size_t>(-1 - doc, recency.size() - 1)];
    recency.erase(std::remove(recency.begin(), recency.end(), doc), recency.end());
    recency.insert(recency.begin(), doc);
    ServeRequest r;
    r.prompt = docs[doc].prompt;
    r.prompt.insert(r.prompt.end(), questions[i].prompt.begin(), questions[i].prompt.end());
    r.max_tokens = 8;
    requests.push_back(std::move(r));
  }
  Progress("kv-tiers: starting a cluster with a small L1 and L2");
  ASSIGN_OR_RETURN(
      RunningServer c,
      StartCluster({.moe_binary = ctx.moe,
                    .model_dir = ctx.model_dir,
                    .router_threads = ctx.options.threads,
                    .stderr_path = (fs::path(ctx.work) / "moe-up-kv-tiers.log").string(),
                    .work_dir = ctx.work,
                    .name = "kv-tiers",
                    .fresh_data = true,
                    .router_args = {"--set", absl::StrCat("core.kv_num_blocks=", kL1Blocks)},
                    .kv_store_args = {"--set", absl::StrCat("core.l2_bytes=", kL2Bytes)}}));
  // 50 ms: the revisits that hit a cache take well under a second in all.
  KvSampler sampler(c.router_metrics_ports, absl::Milliseconds(50));
  std::vector<RequestOutcome> out =
      RunWorkload(c.port, c.model, requests, {.max_concurrency = 1, .timeout_s = 600});
  sampler.Stop();
  c.Stop();
  const ServeSummary summary = Summarize(out, ctx.slo);
  if (!ctx.options.artifacts_dir.empty()) {
    WriteFile((fs::path(ctx.options.artifacts_dir) / "serve-kv-tiers.dat").string(),
              sampler.TierTable());
  }
  const nlohmann::json params = {{"scenario", "kv-tiers"},
                                 {"system", c.system},
                                 {"documents", kDocs},
                                 {"document_tokens", kDocTokens},
                                 {"requests", requests.size()},
                                 {"failed", summary.failed},
                                 {"l1_blocks", kL1Blocks},
                                 {"l2_bytes", kL2Bytes},
                                 {"method",
                                  "moe_prefix_cache_hits_total / queries_total {tier} over the "
                                  "run (router /metrics); a tier's queries missed every tier "
                                  "above it"}};
  for (int t = 0; t < 3; ++t) {
    nlohmann::json p = params;
    p["queries_blocks"] = sampler.Queries(t);
    ctx.report.Add({.name = absl::StrCat("serve_prefix_hit_rate_l", t + 1),
                    .value = sampler.HitRate(t),
                    .unit = "ratio",
                    .params = p});
  }
  Progress(absl::StrCat("kv-tiers: hit rate L1 ", sampler.HitRate(0), ", L2 ", sampler.HitRate(1),
                        ", L3 ", sampler.HitRate(2), "; ", summary.failed, " failed"));
  if (summary.failed > 0) {
    return absl::InternalError(absl::StrCat("kv-tiers: ", summary.failed,
                                            " requests failed, first: ", summary.first_error));
  }
  return absl::OkStatus();
}

// `moe <args...>`'s first stdout line (the admin commands print JSON lines).
absl::StatusOr<std::string> MoeLine(const Ctx& ctx, std::vector<std::string> args,
                                    const std::string& log) {
  args.insert(args.begin(), ctx.moe);
  ASSIGN_OR_RETURN(
      auto r, common::process::RunToExit({.argv = args, .stderr_path = log}, absl::Seconds(120)));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(args[1], " ", args[2], " exited ", r.exit_code, " (", log, ")"));
  }
  return std::string(r.stdout_text.substr(0, r.stdout_text.find('\n')));
}

// Expert load before and after a recalibration, live: a cluster of 1 router + 3 expert workers
// on a zipf:1.2 gate-skewed small model; 16 streams of short prompts (phase 1), `moe admin
// calibrate-router` (the operator's own command), the same load again (phase 2). Each
// phase's load is the difference of `moe admin stats` before and after it. Figure:
// balancedness_after_recalibration_live = the worst layer's measured worker balancedness in
// phase 2 (what the coordinator judges), baseline phase 1's.
absl::Status Recalibration(Ctx& ctx, Systems&) {
  const std::string model_dir = (fs::path(CacheDir(ctx.options)) / "serve-small-zipf1.2").string();
  if (!fs::exists(fs::path(model_dir) / ".complete")) {
    Progress("recalibration: making the zipf:1.2 small model");
    model::MakeModelOptions mo;
    mo.preset = model::Preset::kSmall;
    mo.gate_skew = 1.2;
    RETURN_IF_ERROR(model::MakeModel(mo, model_dir));
    std::ofstream(fs::path(model_dir) / ".complete") << "ok\n";
  }
  Progress("recalibration: starting 1 router + 3 expert workers");
  ASSIGN_OR_RETURN(
      RunningServer c,
      StartCluster({.moe_binary = ctx.moe,
                    .model_dir = model_dir,
                    .router_threads = 1,
                    .expert_workers = 3,
                    .worker_threads = 1,
                    .stderr_path = (fs::path(ctx.work) / "moe-up-recalibration.log").string(),
                    .work_dir = ctx.work,
                    .name = "recalibration",
                    .fresh_data = true}));
  if (c.router_grpc_ports.empty()) return absl::InternalError("moe up named no router gRPC port");
  const std::string routers = absl::StrCat("127.0.0.1:", c.router_grpc_ports[0]);
  const std::string log = (fs::path(ctx.work) / "moe-admin.log").string();
  auto stats = [&]() -> absl::StatusOr<ExpertLoad> {
    ASSIGN_OR_RETURN(
        std::string line,
        MoeLine(ctx, {"admin", "stats", "--routers", routers, "--window", "900s"}, log));
    return ParseAdminStats(line);
  };
  const int n = ctx.options.quick ? 16 : 48;
  int failed[2] = {0, 0};
  std::vector<ExpertLoad> samples;
  nlohmann::json calibration;
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto warm, ShortPrompts(ctx, 2, 4, 4, 52));
    RunWorkload(c.port, c.model, warm, {.max_concurrency = 2, .timeout_s = 120});
    for (int phase = 0; phase < 2; ++phase) {
      // Fresh prompts per phase (same lengths), so phase 2 does not skip prefill in L1.
      ASSIGN_OR_RETURN(auto reqs, ShortPrompts(ctx, n, 32, 32, 53 + phase));
      ASSIGN_OR_RETURN(ExpertLoad s0, stats());
      if (phase == 0) samples.push_back(s0);
      const ServeSummary x = Summarize(
          RunWorkload(c.port, c.model, reqs, {.max_concurrency = 16, .timeout_s = 600}), ctx.slo);
      failed[phase] = x.failed;
      ASSIGN_OR_RETURN(ExpertLoad s1, stats());
      samples.push_back(s1);
      if (phase == 0) {
        Progress("recalibration: moe admin calibrate-router");
        ASSIGN_OR_RETURN(
            std::string line,
            MoeLine(ctx, {"admin", "calibrate-router", "--routers", routers, "--window", "900s"},
                    log));
        calibration = nlohmann::json::parse(line, nullptr, false);
        if (calibration.is_discarded()) {
          return absl::InternalError("calibrate-router printed no JSON: " + line);
        }
      }
    }
    return absl::OkStatus();
  }();
  c.Stop();
  RETURN_IF_ERROR(status);
  ASSIGN_OR_RETURN(ExpertLoad before, LoadBetween(samples[0], samples[1]));
  ASSIGN_OR_RETURN(ExpertLoad after, LoadBetween(samples[1], samples[2]));
  const std::vector<double> b0 = WorkerBalancedness(before), b1 = WorkerBalancedness(after);
  if (!ctx.options.artifacts_dir.empty()) {
    const fs::path dir = ctx.options.artifacts_dir;
    WriteFile((dir / "serve-expert-load-before.dat").string(), ExpertLoadTable(before));
    WriteFile((dir / "serve-expert-load-after.dat").string(), ExpertLoadTable(after));
    WriteFile((dir / "serve-worker-load-before.dat").string(), WorkerLoadTable(before));
    WriteFile((dir / "serve-worker-load-after.dat").string(), WorkerLoadTable(after));
  }
  const double min0 = *std::min_element(b0.begin(), b0.end());
  const double min1 = *std::min_element(b1.begin(), b1.end());
  ctx.report.Add(
      {.name = "balancedness_after_recalibration_live",
       .value = min1,
       .unit = "ratio",
       .params = {{"scenario", "recalibration"},
                  {"cluster", "1 router (1 thread) + 3 expert workers (1 thread each)"},
                  {"model", "small, moe make-model --gate-skew zipf:1.2"},
                  {"requests_per_phase", n},
                  {"streams", 16},
                  {"output_tokens", 32},
                  {"measured_before", b0},
                  {"measured_after", b1},
                  {"expected_before", calibration.value("balancedness_before", nlohmann::json())},
                  {"expected_after", calibration.value("balancedness_after", nlohmann::json())},
                  {"placement_version", calibration.value("version", nlohmann::json())},
                  {"experts_loaded", calibration.value("experts_loaded", nlohmann::json())},
                  {"failed_before", failed[0]},
                  {"failed_after", failed[1]},
                  {"method",
                   "worst layer's mean / max tokens per worker in each phase (moe admin stats "
                   "before - after the phase); recalibrated by moe admin calibrate-router"}},
       .baseline = Baseline{"balancedness_before_recalibration_live", min0}});
  Progress(absl::StrCat("recalibration: worst-layer balancedness ", min0, " -> ", min1, "; ",
                        failed[0] + failed[1], " failed"));
  return absl::OkStatus();
}

struct Scenario {
  const char* name;
  absl::Status (*run)(Ctx&, Systems&);
};
// In run order; a new scenario is one entry here. kv-tiers and recalibration start clusters
// of their own (ours and llama-server stay up, idle, meanwhile).
constexpr Scenario kScenarios[] = {
    {"c16", Concurrency16}, {"prefix", PrefixWarmCold},
    {"sweep", RateSweep},   {"workloads", SharedPrefixWorkloads},
    {"kv-tiers", KvTiers},  {"recalibration", Recalibration},
};

// --- the two modes ---

absl::StatusOr<int32_t> VocabSize(const std::string& model_dir) {
  std::ifstream in(fs::path(model_dir) / "config.json");
  nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  if (c.is_discarded() || !c.contains("vocab_size")) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir, "/config.json: no vocab_size"));
  }
  return c["vocab_size"].get<int32_t>();
}

absl::StatusOr<BenchReport> SideBySide(const SuiteOptions& options, const Slo& slo) {
  SuiteOptions o = options;
  // Defined on the small preset (8192-token context); an explicit preset or model is honoured.
  if (o.model_dir.empty() && o.preset == "bench") o.preset = "small";
  std::string dir = o.model_dir;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(o));
  }
  BenchReport report("serve");
  Ctx ctx{.options = o, .report = report, .slo = slo};
  ASSIGN_OR_RETURN(ctx.vocab_size, VocabSize(dir));
  const std::string moe = SelfDir() + "/moe";
  const std::string work =
      o.artifacts_dir.empty() ? (fs::path(CacheDir(o)) / "serve").string() : o.artifacts_dir;
  ctx.moe = moe;
  ctx.model_dir = dir;
  ctx.work = work;
  fs::create_directories(work);
  const std::string gguf =
      (fs::path(work) / (fs::path(dir).filename().string() + ".gguf")).string();

  Progress("starting our cluster (moe up)");
  // Fresh kv-store L3: the prefix scenario's documents are the same in every run, and an earlier
  // run's blocks on disk would make its "cold" TTFT an L3 hit.
  ASSIGN_OR_RETURN(RunningServer ours,
                   StartCluster({.moe_binary = moe,
                                 .model_dir = dir,
                                 .router_threads = o.threads,
                                 .stderr_path = (fs::path(work) / "moe-up.log").string(),
                                 .work_dir = work,
                                 .name = "0",
                                 .fresh_data = true}));
  Flags flags(o.flags);
  const std::string llama_bin = flags.Str(
      "llama-server", std::string(MOE_SOURCE_DIR) + "/bench/llamacpp/.native/bin/llama-server");
  std::optional<RunningServer> theirs;
  std::string llama_missing;
  if (absl::Status s = ExportGguf(moe, dir, gguf); !s.ok()) {
    llama_missing = absl::StrCat("moe export-gguf: ", s.message());
  } else {
    Progress("starting llama-server");
    auto started =
        StartLlamaServer({.binary = llama_bin,
                          .gguf = gguf,
                          .threads = o.threads,
                          .stderr_path = (fs::path(work) / "llama-server.log").string()});
    if (started.ok()) {
      theirs = std::move(*started);
    } else {
      llama_missing = std::string(started.status().message());
    }
  }
  if (!llama_missing.empty()) {
    Progress("no side-by-side: " + llama_missing);
    report.Add({.name = "serve_side_by_side_skipped",
                .value = 1,
                .unit = "flag",
                .params = {{"reason", llama_missing}}});
  }
  Systems sys{.ours = &ours, .theirs = theirs ? &*theirs : nullptr};
  // One warm-up request each (page cache, first allocations).
  for (RunningServer* s : sys.Both()) {
    ASSIGN_OR_RETURN(auto warm, ShortPrompts(ctx, 2, 8, 8, 99));
    RunWorkload(s->port, s->model, warm, {.max_concurrency = 2, .timeout_s = 120});
  }
  // --scenarios NAME,...: only those (and the topology comparison only when named "topology").
  const std::string only = flags.Str("scenarios", "");
  const std::vector<std::string> wanted = absl::StrSplit(only, ',', absl::SkipEmpty());
  auto want = [&](const std::string& name) {
    return wanted.empty() || std::find(wanted.begin(), wanted.end(), name) != wanted.end();
  };
  for (const std::string& w : wanted) {
    bool known = w == "topology";
    for (const Scenario& sc : kScenarios) known = known || w == sc.name;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("--scenarios: unknown '", w, "'"));
  }
  absl::Status status;
  for (const Scenario& sc : kScenarios) {
    if (!want(sc.name)) continue;
    Progress(absl::StrCat("scenario ", sc.name));
    status = sc.run(ctx, sys);
    if (!status.ok()) break;
  }
  if (theirs) theirs->Stop();
  ours.Stop();
  RETURN_IF_ERROR(status);
  if (!want("topology")) return report;

  // Embedded vs disaggregated (router 1 thread + 2 workers x 1 thread, as `moe bench experts`).
  Progress("starting the disaggregated cluster (1 router + 2 expert workers)");
  ASSIGN_OR_RETURN(RunningServer disagg,
                   StartCluster({.moe_binary = moe,
                                 .model_dir = dir,
                                 .router_threads = 1,
                                 .expert_workers = 2,
                                 .worker_threads = 1,
                                 .stderr_path = (fs::path(work) / "moe-up-disagg.log").string(),
                                 .work_dir = work}));
  ASSIGN_OR_RETURN(RunningServer embedded,
                   StartCluster({.moe_binary = moe,
                                 .model_dir = dir,
                                 .router_threads = o.threads,
                                 .stderr_path = (fs::path(work) / "moe-up-embedded.log").string(),
                                 .work_dir = work}));
  const int waves = o.quick ? 1 : 2;
  double tok[2] = {0, 0};
  RunningServer* pair[2] = {&embedded, &disagg};
  for (int k = 0; k < 2; ++k) {
    ASSIGN_OR_RETURN(auto reqs, ShortPrompts(ctx, 16 * waves, 64, 64, 17));
    Measured m =
        Measure(ctx, *pair[k], "topology-c16", reqs, {.max_concurrency = 16, .timeout_s = 600},
                {{"output_tokens", 64}}, {"output_tok_s", "ttft_ms_p50", "itl_ms_p50"});
    tok[k] = DecodeTokS(m.outcomes);
  }
  disagg.Stop();
  embedded.Stop();
  // value = disaggregated, baseline = embedded: ratio = disaggregated / embedded.
  report.Add({.name = "serve_decode_tok_s_disagg",
              .value = tok[1],
              .unit = "tok/s",
              .params = {{"disagg", "router 1 thread + 2 expert workers x 1 thread"},
                         {"embedded", absl::StrCat("router ", o.threads, " threads")},
                         {"streams", 16},
                         {"output_tokens", 64},
                         {"through", "the gateway's OpenAI API"}},
              .baseline = Baseline{"serve_decode_tok_s_embedded", tok[0]}});
  return report;
}

absl::StatusOr<BenchReport> AgainstUrl(const SuiteOptions& o, const Slo& slo) {
  Flags f(o.flags);
  const std::string url = f.Str("url", "");
  // Loopback only: this tool is never pointed at another machine.
  int port = 0;
  for (const char* prefix : {"http://127.0.0.1:", "http://localhost:"}) {
    if (url.rfind(prefix, 0) == 0) port = std::atoi(url.c_str() + std::strlen(prefix));
  }
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--url must be http://127.0.0.1:PORT (loopback only), got '", url, "'"));
  }
  std::string model = f.Str("served-model", "");
  if (model.empty()) {
    auto r = common::http::HttpCall(port, "GET", "/v1/models");
    nlohmann::json j = r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("data") || j["data"].empty()) {
      return absl::UnavailableError(absl::StrCat(url, "/v1/models gave no model (is it up?)"));
    }
    model = j["data"][0].value("id", "");
  }
  ASSIGN_OR_RETURN(int n, f.Int("num-requests", 64));
  ASSIGN_OR_RETURN(int concurrency, f.Int("concurrency", 0));
  ASSIGN_OR_RETURN(double rate, f.Num("rate", 0));
  ASSIGN_OR_RETURN(double burstiness, f.Num("burstiness", 1));
  ASSIGN_OR_RETURN(int seed, f.Int("seed", 1));
  ASSIGN_OR_RETURN(int vocab, f.Int("vocab", 1024));
  ASSIGN_OR_RETURN(int shared_prefix, f.Int("shared-prefix", 0));
  const std::string workload = f.Str("workload", f.Has("trace") ? "trace" : "random");
  RandomWorkloadOptions ro{.num_requests = n,
                           .input_min = 32,
                           .input_max = 256,
                           .output_min = 64,
                           .output_max = 128,
                           .shared_prefix = shared_prefix,
                           .vocab_size = vocab,
                           .seed = static_cast<uint64_t>(seed)};
  RETURN_IF_ERROR(f.Range("input-len", &ro.input_min, &ro.input_max));
  RETURN_IF_ERROR(f.Range("output-len", &ro.output_min, &ro.output_max));
  auto build = [&]() -> absl::StatusOr<std::vector<ServeRequest>> {
    if (workload == "random") return RandomWorkload(ro);
    if (workload == "shared-prefix") {
      RandomWorkloadOptions so = ro;
      if (!f.Has("shared-prefix")) so.shared_prefix = 1024;
      return RandomWorkload(so);
    }
    if (workload == "multi-turn") {
      ASSIGN_OR_RETURN(int turns, f.Int("turns", 4));
      return MultiTurnWorkload({.num_chats = std::max(1, n / std::max(1, turns)),
                                .turns = turns,
                                .system_tokens = f.Has("shared-prefix") ? shared_prefix : 512,
                                .user_tokens = ro.input_min,
                                .output_tokens = ro.output_min,
                                .vocab_size = vocab,
                                .seed = static_cast<uint64_t>(seed)});
    }
    if (workload == "trace") {
      const std::string path = f.Str("trace", "");
      std::vector<TraceEntry> trace;
      if (path.empty()) {
        ASSIGN_OR_RETURN(trace, SyntheticTrace({.num_requests = n,
                                                .rate = rate > 0 ? rate : 2,
                                                .seed = static_cast<uint64_t>(seed)}));
      } else {
        std::ifstream in(path);
        if (!in) return absl::NotFoundError(absl::StrCat("--trace: cannot read ", path));
        std::stringstream ss;
        ss << in.rdbuf();
        ASSIGN_OR_RETURN(trace, ParseMooncakeTrace(ss.str()));
      }
      ASSIGN_OR_RETURN(double scale, f.Num("time-scale", 1));
      ASSIGN_OR_RETURN(int max_input, f.Int("max-input", 0));
      ASSIGN_OR_RETURN(int max_output, f.Int("max-output", 0));
      return TraceToRequests(trace, {.time_scale = scale,
                                     .max_input = max_input,
                                     .max_output = max_output,
                                     .vocab_size = vocab,
                                     .seed = static_cast<uint64_t>(seed)});
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--workload: random, shared-prefix, multi-turn or trace, got '", workload, "'"));
  };
  std::vector<double> rates;
  if (f.Has("rates")) {
    for (absl::string_view part : absl::StrSplit(f.Str("rates", ""), ',', absl::SkipEmpty())) {
      double r = 0;
      if (!absl::SimpleAtod(part, &r) || !(r > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("--rates: bad rate '", part, "'"));
      }
      rates.push_back(r);
    }
  } else {
    rates.push_back(rate);  // 0: closed loop (or the trace's own timestamps)
  }
  BenchReport report("serve");
  SuiteOptions ctx_options = o;
  Ctx ctx{.options = ctx_options, .report = report, .slo = slo};
  RunningServer target{.system = f.Str("name", "target"), .port = port, .model = model};
  for (double r : rates) {
    ASSIGN_OR_RETURN(std::vector<ServeRequest> reqs, build());
    if (workload != "trace" && r > 0) {
      const std::vector<double> at = PoissonArrivals(static_cast<int>(reqs.size()), r, burstiness,
                                                     static_cast<uint64_t>(seed) + 1);
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i].after < 0) reqs[i].arrival_s = at[i];
      }
    }
    Measure(ctx, target, workload, reqs, {.max_concurrency = concurrency, .timeout_s = 3600},
            {{"rate", r > 0 ? nlohmann::json(r) : nlohmann::json("inf")},
             {"burstiness", burstiness},
             {"url", url}});
  }
  target.child.reset();
  return report;
}

absl::StatusOr<BenchReport> RunServeSuite(const SuiteOptions& o) {
  Flags f(o.flags);
  Slo slo{.ttft_ms = 1000, .tpot_ms = 100};
  if (f.Has("goodput") && !Slo::Parse(f.Str("goodput", ""), &slo)) {
    return absl::InvalidArgumentError(
        "--goodput: KEY:MS[,KEY:MS] with keys ttft, tpot, e2el (e.g. ttft:1000,tpot:100)");
  }
  if (f.Has("make-trace")) {
    ASSIGN_OR_RETURN(int n, f.Int("num-requests", 64));
    ASSIGN_OR_RETURN(double rate, f.Num("rate", 2));
    ASSIGN_OR_RETURN(int seed, f.Int("seed", 1));
    SyntheticTraceOptions to{.num_requests = n, .rate = rate, .seed = static_cast<uint64_t>(seed)};
    RETURN_IF_ERROR(f.Range("input-len", &to.input_min, &to.input_max));
    RETURN_IF_ERROR(f.Range("output-len", &to.output_min, &to.output_max));
    ASSIGN_OR_RETURN(to.num_prefixes, f.Int("num-prefixes", to.num_prefixes));
    ASSIGN_OR_RETURN(to.prefix_share, f.Num("prefix-share", to.prefix_share));
    ASSIGN_OR_RETURN(auto trace, SyntheticTrace(to));
    const std::string path = f.Str("make-trace", "");
    std::ofstream out(path);
    out << FormatMooncakeTrace(trace);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
    BenchReport report("serve");
    report.Add({.name = "trace_requests",
                .value = static_cast<double>(trace.size()),
                .unit = "requests",
                .params = {{"file", path}, {"rate", rate}}});
    return report;
  }
  if (f.Has("url")) return AgainstUrl(o, slo);
  return SideBySide(o, slo);
}

const std::vector<std::string> kServeFlags = {
    "url",          "workload",     "rate",         "rates",         "concurrency",
    "num-requests", "input-len",    "output-len",   "shared-prefix", "turns",
    "trace",        "time-scale",   "max-input",    "max-output",    "burstiness",
    "goodput",      "seed",         "vocab",        "served-model",  "name",
    "make-trace",   "num-prefixes", "prefix-share", "llama-server",  "scenarios"};

}  // namespace

MOE_REGISTER_BENCH_SUITE_EX("serve",
                            "serving through the OpenAI API: load generator; side by side with "
                            "llama-server; embedded vs disaggregated",
                            RunServeSuite, kServeFlags, 2400, 900);

}  // namespace moe::bench::serve
