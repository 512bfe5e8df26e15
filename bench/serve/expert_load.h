// Per-(layer, expert) and per-(layer, worker) load of a running cluster, as `moe admin stats`
// prints it (one JSON line per router: expert_tokens [layers * experts], worker_tokens
// {"<worker id>": [tokens per layer]}, num_workers, measured_balancedness [per layer]), for the
// serving benchmark's recalibration scenario: the cumulative counts before and after a phase
// of load are subtracted, so each phase's load is exactly the traffic it sent.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::bench::serve {

struct ExpertLoad {
  int32_t num_layers = 0;
  int32_t num_experts = 0;
  std::vector<double> expert_tokens;                   // [num_layers * num_experts]
  std::map<std::string, std::vector<double>> workers;  // worker id -> [num_layers]
  int32_t num_workers = 0;                             // the placement's (some may be idle)
};

// One `moe admin stats` line. kInvalidArgument when it is not one (no expert_tokens, no
// worker_tokens: an embedded router has no workers, or sizes that do not fit).
absl::StatusOr<ExpertLoad> ParseAdminStats(const std::string& line);

// `later` - `earlier`, entry by entry (workers missing from `earlier` count as 0). Shapes must
// match (kInvalidArgument otherwise).
absl::StatusOr<ExpertLoad> LoadBetween(const ExpertLoad& earlier, const ExpertLoad& later);

// Per layer: mean over the num_workers workers of their tokens / the max (workers without an
// entry count as 0; 1 when the layer ran nothing): moe_expert_balancedness's definition.
std::vector<double> WorkerBalancedness(const ExpertLoad& load);

// gnuplot tables (`with image`: one row per cell, a blank line after each layer):
//   "layer expert tokens share_of_layer"
std::string ExpertLoadTable(const ExpertLoad& load);
//   "layer worker tokens tokens_over_layer_mean" (workers in id order, renumbered 0..n-1)
std::string WorkerLoadTable(const ExpertLoad& load);

}  // namespace moe::bench::serve
