// What `moe bench serve`'s side-by-side scenarios share (serve_bench.cc runs them; each is one
// function in scenarios_load.cc or scenarios_cluster.cc): the run's context, measuring one
// workload on one server into the report, and the router-side KV / prefix-hit sampler.
#pragma once

#include <algorithm>
#include <atomic>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/common/suite.h"
#include "bench/serve/serve_client.h"
#include "bench/serve/serve_stats.h"
#include "bench/serve/servers.h"
#include "bench/serve/workload.h"
#include "common/http/http_client.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {

// "moe bench serve: <msg>" on stderr.
void Progress(const std::string& msg);

struct Ctx {
  const SuiteOptions& options;
  BenchReport& report;
  Slo slo;
  int32_t vocab_size = 1024;
  std::string moe;        // the `moe` CLI (scenarios that start their own cluster)
  std::string model_dir;  // the checkpoint both systems serve
  std::string work;       // config files and logs
};

void WriteFile(const std::string& path, const std::string& text);

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

// Runs `requests` on `server` under `load` once the CPUs are idle (SettleCpu); adds ToResults'
// figures (those in `keep`, all when empty) with `params` (plus `settle_ms`) to the report and,
// with an artifacts dir, the per-request tables.
Measured Measure(Ctx& ctx, RunningServer& server, const std::string& scenario,
                 const std::vector<ServeRequest>& requests, const LoadOptions& load,
                 nlohmann::json params, const Keep& keep = {}, const std::string& tag = "");

// Each of `servers` (one or two) runs the same `rounds` workloads (make(r) for round r), taking
// turns ABBA (a b, b a, a b, ...): a drift of the shared machine's speed during the scenario
// weighs on both alike, where running one system's rounds and then the other's would hand the
// drift to one of them. Each server's rounds are reported as one Measure of all of them (their
// times laid back to back); decode_tok_s is the rounds' tokens over the sum of their decode
// spans.
// The `order` param of every figure taken in turns.
inline constexpr char kTurnsOrder[] = "ABBA: the systems take turns, round by round";
struct TurnsMeasured {
  Measured measured;
  double decode_tok_s = 0;
};
absl::StatusOr<std::vector<TurnsMeasured>> MeasureInTurns(
    Ctx& ctx, const std::vector<RunningServer*>& servers, int rounds, const std::string& scenario,
    const std::function<absl::StatusOr<std::vector<ServeRequest>>(int round)>& make,
    const LoadOptions& load, nlohmann::json params, const Keep& keep = {},
    const std::string& tag = "");

// A figure with llama-server's value as its baseline (when there is one).
void AddCompared(Ctx& ctx, const std::string& name, double ours, std::optional<double> theirs,
                 const std::string& unit, nlohmann::json params);

// `n` distinct prompts of 16-64 tokens, outputs of out_min-out_max tokens.
absl::StatusOr<std::vector<ServeRequest>> ShortPrompts(const Ctx& ctx, int n, int32_t out_min,
                                                       int32_t out_max, uint64_t seed);

struct Systems {
  RunningServer* ours = nullptr;
  RunningServer* theirs = nullptr;  // null when llama-server is not available
  std::vector<RunningServer*> Both() const {
    std::vector<RunningServer*> v = {ours};
    if (theirs) v.push_back(theirs);
    return v;
  }
};

// The scenarios of the side-by-side run (serve_bench.cc's kScenarios).
absl::Status Concurrency16(Ctx& ctx, Systems& sys);  // scenarios_load.cc
absl::Status PrefixWarmCold(Ctx& ctx, Systems& sys);
absl::Status RateSweep(Ctx& ctx, Systems& sys);
absl::Status SharedPrefixWorkloads(Ctx& ctx, Systems& sys);  // scenarios_cluster.cc
absl::Status KvTiers(Ctx& ctx, Systems& sys);
absl::Status Recalibration(Ctx& ctx, Systems& sys);

}  // namespace moe::bench::serve
