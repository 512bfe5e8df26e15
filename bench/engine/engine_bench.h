// `moe bench engine`: the engine's speed on one checkpoint (DESIGN.md §6 names): model_load_s,
// prefill_tok_s (a 512-token prompt in one step), decode_tok_s_b1/b8/b32, peak_rss_bytes and
// decode_bandwidth_efficiency (weight bytes read per second at batch 1 -- the dense weights plus
// the experts actually routed to in each layer -- over the streaming read bandwidth measured in
// the same run with the same threads).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "bench/common/bench_report.h"
#include "bench/common/suite.h"

namespace moe::bench {

// Generates (or reuses from the cache) the preset checkpoint unless options.model_dir is set,
// then measures. Progress goes to stderr.
absl::StatusOr<BenchReport> RunEngineBench(const SuiteOptions& options);

// The checkpoint directory for a preset: generated on first use into the cache directory.
absl::StatusOr<std::string> PresetCheckpoint(const SuiteOptions& options);

}  // namespace moe::bench
