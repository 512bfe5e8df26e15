// The plots of a `moe bench all` run (PNG, drawn by gnuplot from the samples the suites wrote
// into the run directory). Each plot is drawn only when its data is there:
//   serve-ttft-cdf.png   TTFT distribution (CDF), 16 concurrent streams, ours vs llama-server
//   serve-itl-cdf.png    inter-token latency distribution (CDF), same run
//   serve-load.png       output tok/s and p90 TTFT vs offered Poisson rate, both systems
//   serve-kv.png         router L1 KV usage and prefix-hit rate (per 200 ms window) over the
//                        shared-prefix, multi-turn and trace workloads
// A new plot (tier hit rates, voice stages) is one more entry in plots.cc's table.
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
