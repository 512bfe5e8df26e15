// What `moe bench serve` reports about one run, computed from per-request outcomes with no
// network: the figures `vllm bench serve` prints (request and token throughput; TTFT, TPOT,
// inter-token latency and e2e latency, mean / p50 / p90 / p99) plus goodput under an objective.
//
// Definitions (vLLM's benchmark_serving):
//   TTFT   send -> first content chunk
//   TPOT   (e2e - TTFT) / (output_tokens - 1), per request with more than one output token
//   ITL    gaps between successive content chunks, pooled over all requests
//   e2e    send -> end of the stream
//   request_throughput = completed / duration; output_tok_s = output tokens / duration
//   goodput = completed requests meeting every set objective (TTFT, TPOT, e2e) / duration
// Percentiles interpolate linearly between order statistics (numpy's default, as vLLM).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/common/bench_report.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {

// One request as the client saw it; times in seconds.
struct RequestOutcome {
  bool ok = false;
  std::string error;            // why not ok
  double send_s = 0;            // when it was sent, since the run's start
  std::vector<double> chunk_s;  // arrival of each content chunk, since send
  double e2e_s = 0;             // end of stream, since send
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;  // usage.completion_tokens (or chunks when no usage came)
};

// The objective of goodput; a field <= 0 is not part of it.
struct Slo {
  double ttft_ms = 0;
  double tpot_ms = 0;
  double e2e_ms = 0;
  // "ttft:1000,tpot:100" (vLLM's --goodput ttft:1000 tpot:100, either separator). Unknown keys
  // or bad numbers: false.
  static bool Parse(const std::string& text, Slo* out);
  std::string ToString() const;  // "ttft<=1000ms tpot<=100ms"
  bool Met(double ttft_ms, double tpot_ms, double e2e_ms) const;
};

struct Distribution {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
  int64_t count = 0;
};

struct ServeSummary {
  int64_t completed = 0;
  int64_t failed = 0;
  std::string first_error;
  double duration_s = 0;      // first send -> last end
  int64_t prompt_tokens = 0;  // of completed requests
  int64_t output_tokens = 0;
  double request_throughput = 0;  // req/s
  double output_tok_s = 0;
  double total_tok_s = 0;  // prompt + output
  double goodput = 0;      // req/s meeting the Slo (== request_throughput with no Slo)
  int64_t good = 0;
  Distribution ttft_ms, tpot_ms, itl_ms, e2e_ms;
};

// p in [0, 1]; 0 for an empty sample. Linear interpolation between order statistics.
double Percentile(std::vector<double> values, double p);
Distribution Describe(std::vector<double> values);

// duration_s <= 0: measured as first send to last end of the outcomes.
ServeSummary Summarize(const std::vector<RequestOutcome>& outcomes, const Slo& slo,
                       double duration_s = 0);

// The summary as DESIGN.md §6 results: request_throughput, output_tok_s, total_tok_s, goodput
// (objective in params), ttft_ms_{mean,p50,p90,p99}, tpot_ms_*, itl_ms_*, e2e_ms_*; `params`
// (the scenario and system) goes on every one, with completed/failed counts.
std::vector<BenchResult> ToResults(const ServeSummary& s, const Slo& slo,
                                   const nlohmann::json& params);

// A run's decode: output tokens after each request's first, and the time from the first first
// token to the last end (0 when nothing decoded). Their ratio is the rate at which the system
// decodes while all streams run.
struct DecodeSpan {
  int64_t tokens = 0;
  double seconds = 0;
  double tok_s() const { return seconds > 0 ? tokens / seconds : 0; }
};
DecodeSpan DecodeSpanOf(const std::vector<RequestOutcome>& outcomes);

// Rounds of one workload taken in turns by n systems: who goes when in round r. Even rounds
// 0, 1, .., n-1; odd rounds the reverse (ABBA for two), so a drift of the machine's speed over
// the rounds weighs on every system alike.
std::vector<size_t> TurnOrder(int round, size_t n);

// Appends one round's outcomes (timed from the round's start) to a system's earlier rounds, laid
// after them: send_s += *elapsed, then *elapsed grows by the round's last end. Summarize of all
// rounds then has their summed times as its duration, not the gaps between them.
void AppendRound(std::vector<RequestOutcome> round, std::vector<RequestOutcome>* all,
                 double* elapsed);

// Per-request rows for plots: "send_s ttft_ms tpot_ms e2e_ms output_tokens ok", one per line.
std::string OutcomeTable(const std::vector<RequestOutcome>& outcomes);

}  // namespace moe::bench::serve
