// The one benchmark results schema (DESIGN.md §6), shared by every `moe bench` suite:
//   {"suite": "...", "started": "<ISO time>", "machine": {"cpus": N, "cpu_model": "..."},
//    "results": [{"name": "...", "value": X, "unit": "...", "params": {...},
//                 "baseline": {"name": "...", "value": Y}, "ratio": X/Y}]}
// `baseline` and `ratio` appear only when a baseline was measured in the same run.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace moe::bench {

struct Baseline {
  std::string name;
  double value = 0;
};

struct BenchResult {
  std::string name;                                  // e.g. "decode_tok_s_b1"
  double value = 0;                                  // the figure itself
  std::string unit;                                  // "tok/s", "s", "bytes", "ratio", ...
  nlohmann::json params = nlohmann::json::object();  // what it was measured with
  std::optional<Baseline> baseline;
};

struct MachineInfo {
  int cpus = 0;           // online CPUs
  std::string cpu_model;  // /proc/cpuinfo "model name" ("unknown" if absent)
};

// Reads the machine description of this host.
MachineInfo DetectMachine();
// Now as "YYYY-MM-DDTHH:MM:SSZ" (UTC).
std::string IsoTimeNow();
// The process's peak resident set size in bytes (VmHWM), 0 if unknown.
int64_t PeakRssBytes();

// Collects results of one suite run. Thread-compatible.
class BenchReport {
 public:
  // `started` defaults to IsoTimeNow(), `machine` to DetectMachine().
  explicit BenchReport(std::string suite);
  BenchReport(std::string suite, std::string started, MachineInfo machine);

  void Add(BenchResult result);
  const std::vector<BenchResult>& results() const { return results_; }
  const std::string& suite() const { return suite_; }

  nlohmann::json ToJson() const;
  // Writes ToJson() as one line plus '\n' to `path`, or to stdout when path is "" or "-".
  // Errors: Internal naming the file when it cannot be written.
  absl::Status Write(const std::string& path) const;

 private:
  std::string suite_;
  std::string started_;
  MachineInfo machine_;
  std::vector<BenchResult> results_;
};

}  // namespace moe::bench
