// The registry behind `moe bench SUITE`: each bench/<suite>/ library registers one suite with
// MOE_REGISTER_BENCH_SUITE and links itself into the CLI whole-archive (see
// bench/engine/CMakeLists.txt), so `moe bench all` finds every suite the build has.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/common/bench_report.h"

namespace moe::bench {

// Flags common to every suite (DESIGN.md §6).
struct SuiteOptions {
  std::string preset = "bench";  // a `moe make-model` preset generated for the run...
  bool preset_given = false;     // --preset was on the command line (suites with another default)
  std::string model_dir;         // ...or an existing checkpoint (wins over preset)
  std::string arch = "mixtral";  // for presets
  std::string dtype = "bf16";    // for presets: f32, bf16, f16
  int threads = 2;
  // Where generated preset checkpoints are cached between runs; "" = kDefaultCacheDir. `moe
  // bench` fills it from --cache-dir, else $MOE_BENCH_CACHE. Suites read it via CacheDir().
  std::string cache_dir;
  bool quick = false;  // fewer iterations (smoke tests)
  // Where a suite may write files beside its JSON (per-request samples for plots); "" = none.
  // `moe bench all` sets it to its run directory; `moe bench SUITE --artifacts DIR` by hand.
  std::string artifacts_dir;
  // The suite's own flags (`--name value`), for the names in its Suite::flags.
  std::map<std::string, std::string> flags;
};

inline constexpr char kDefaultCacheDir[] = "/tmp/moe-bench-cache";

// The directory for generated checkpoints: options.cache_dir, or kDefaultCacheDir when empty.
std::string CacheDir(const SuiteOptions& options);

using SuiteFn = std::function<absl::StatusOr<BenchReport>(const SuiteOptions&)>;

struct Suite {
  std::string name;
  std::string summary;
  SuiteFn run;
  std::vector<std::string> flags = {};  // the suite's own flags, beyond SuiteOptions'
  // `moe bench all` stops a suite that runs longer than this and records it as skipped.
  int budget_s = 600;
  int quick_budget_s = 180;
};

std::map<std::string, Suite>& Suites();
bool RegisterSuite(Suite suite);

}  // namespace moe::bench

#define MOE_REGISTER_BENCH_SUITE(name, summary, fn) \
  static const bool moe_bench_registered_##fn = ::moe::bench::RegisterSuite({name, summary, fn})
// The same with the suite's own flags and `moe bench all` budgets (seconds, full and --quick).
#define MOE_REGISTER_BENCH_SUITE_EX(name, summary, fn, flags, budget_s, quick_budget_s) \
  static const bool moe_bench_registered_##fn =                                         \
      ::moe::bench::RegisterSuite({name, summary, fn, flags, budget_s, quick_budget_s})
