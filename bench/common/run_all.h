// `moe bench all`: every suite this build has, each in its own `moe bench SUITE` child process
// with a time budget, into one run directory:
//   <dir>/results.json     DESIGN.md §6 schema, suite "all": every suite's results (each with
//                          params.suite), plus "suites": [{name, status ok|skipped, reason,
//                          seconds, budget_s}], "plots": [file names], and "goals": every
//                          issue's goal figure with its verdict (goals.h; matching results
//                          carry theirs in "goals" too)
//   <dir>/<suite>.json     the suite's own report;  <dir>/<suite>.log  its stderr
//   <dir>/*.dat            samples the suites wrote (SuiteOptions::artifacts_dir)
//   <dir>/*.png            the plots (plots.h), when gnuplot is installed
// A suite that fails, is unsupported on this machine or outlives its budget is recorded as
// skipped with its reason (the last line of its log, or "over budget"), and the run goes on.
// One progress line per suite on stderr.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/suite.h"

namespace moe::bench {

struct RunAllOptions {
  std::string moe_binary;               // this `moe`
  std::string dir;                      // the run directory (created)
  std::vector<std::string> suite_args;  // passed to every suite (--preset, --threads, ...)
  // Each suite's own flags given to `moe bench all`, forwarded to the suites that declare them.
  std::map<std::string, std::string> suite_flags;
  bool quick = false;
  double budget_scale = 1;  // multiplies every budget (a slow or busy machine)
};

struct SuiteRun {
  std::string name;
  bool ok = false;
  std::string reason;  // why skipped
  double seconds = 0;
  int budget_s = 0;
  size_t results = 0;
};

// Runs the suites in `suites` (registry order), writes results.json and the plots. Errors only
// when the run directory cannot be written.
absl::StatusOr<std::vector<SuiteRun>> RunAllSuites(const RunAllOptions& options,
                                                   const std::vector<const Suite*>& suites);

}  // namespace moe::bench
