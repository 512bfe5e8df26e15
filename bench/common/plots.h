// The plots of a `moe bench all` run (PNG, drawn by gnuplot from the samples the suites wrote
// into the run directory). Each plot is drawn only when its data is there:
//   serve-ttft-cdf.png   TTFT distribution (CDF), 16 concurrent streams, ours vs llama-server
//   serve-itl-cdf.png    inter-token latency distribution (CDF), same run
//   serve-load.png       output tok/s and p90 TTFT vs offered Poisson rate, both systems
//   serve-kv.png         router L1 KV usage and prefix-hit rate (per 200 ms window) over the
//                        shared-prefix, multi-turn and trace workloads
//   serve-kv-tiers.png   prefix-cache hit rate of L1, L2 and L3 (cumulative) over a workload
//                        whose documents exceed L1 and L2 (router and kv-store /metrics)
//   serve-expert-heatmap.png  per-(layer, expert) share and per-(layer, worker) load before
//                        and after `moe admin calibrate-router` on a zipf-skewed model
//   voice-stages.png     `moe bench voice`'s per-stage medians, stacked, speculative prefill
//                        on and off, with the measured first-audio p50
// A new plot is one more entry in plots.cc's table (several panels: Plot::panels).
#pragma once

#include <string>
#include <vector>

namespace moe::bench {

struct PlotSet {
  std::vector<std::string> written;  // file names inside the directory
  std::string skipped_reason;        // "" unless gnuplot is missing or failed
};

// Writes <dir>/plots.gp and runs gnuplot on it.
PlotSet MakePlots(const std::string& dir);

}  // namespace moe::bench
