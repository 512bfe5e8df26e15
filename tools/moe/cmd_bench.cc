// `moe bench SUITE [--preset P | --model DIR] [--threads N] [--out FILE]` (DESIGN.md §6).
// Also: --arch A and --dtype D (for presets; default mixtral, bf16), --cache-dir DIR (generated
// presets are kept there between runs; default $MOE_BENCH_CACHE, else bench::kDefaultCacheDir),
// --quick (fewer iterations), --artifacts DIR (samples for plots), and a suite's own flags
// (Suite::flags, e.g. `moe bench serve --url ...`). `moe bench all` runs every suite this build
// has, each in a child process with a time budget (bench/common/run_all.h), and writes
// bench/results/<time>/results.json plus plots.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/run_all.h"
#include "bench/common/suite.h"
#include "tools/moe/command.h"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

namespace moe::cli {
namespace {

std::string SelfExe() {
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "moe" : exe.string();
}

// `moe bench all [--quick] [--suites a,b] [--results-dir DIR] [--budget-scale X] [suite flags]`:
// every suite (or those named) in
// its own child process (bench/common/run_all.h); results.json and plots in
// bench/results/<UTC time>/ of the source tree unless --results-dir.
int RunAll(const Args& args, const bench::SuiteOptions& o,
           const std::vector<const bench::Suite*>& suites) {
  bench::RunAllOptions ro;
  ro.moe_binary = SelfExe();
  ro.quick = o.quick;
  std::string stamp = bench::IsoTimeNow();
  stamp.erase(std::remove(stamp.begin(), stamp.end(), ':'), stamp.end());
  ro.dir =
      args.GetOr("results-dir",
                 (std::filesystem::path(MOE_SOURCE_DIR) / "bench" / "results" / stamp).string());
  auto scale = args.GetDouble("budget-scale", 1);
  if (!scale.ok() || !(*scale > 0)) {
    std::fprintf(stderr, "moe bench all: --budget-scale must be a positive number\n");
    return 2;
  }
  ro.budget_scale = *scale;
  for (const char* f : {"preset", "model", "threads", "arch", "dtype", "cache-dir"}) {
    if (auto v = args.Get(f)) {
      ro.suite_args.push_back(std::string("--") + f);
      ro.suite_args.push_back(*v);
    }
  }
  for (const bench::Suite* s : suites) {
    for (const std::string& f : s->flags) {
      if (auto v = args.Get(f)) ro.suite_flags[f] = *v;
    }
  }
  auto runs = bench::RunAllSuites(ro, suites);
  if (!runs.ok()) {
    std::fprintf(stderr, "moe bench all: %s\n", std::string(runs.status().message()).c_str());
    return 1;
  }
  std::printf("%s\n", (std::filesystem::path(ro.dir) / "results.json").string().c_str());
  return 0;
}

int RunBench(const Args& /*parsed*/, const std::vector<std::string>& argv) {
  auto args = Args::Parse(argv, {"quick"});
  auto& suites = bench::Suites();
  std::vector<std::string> known_flags = {"preset", "model",     "threads", "out",      "arch",
                                          "dtype",  "cache-dir", "quick",   "artifacts"};
  // A suite's own flags (`moe bench serve --url ...`) are known when that suite is named.
  const bench::Suite* named = nullptr;
  if (args.ok() && args->positional().size() == 1) {
    if (auto it = suites.find(args->positional()[0]); it != suites.end()) named = &it->second;
  }
  if (named != nullptr)
    known_flags.insert(known_flags.end(), named->flags.begin(), named->flags.end());
  const bool all = args.ok() && args->positional().size() == 1 && args->positional()[0] == "all";
  if (all) {
    known_flags.insert(known_flags.end(), {"results-dir", "budget-scale", "suites"});
    for (const auto& [name, s] : suites)
      known_flags.insert(known_flags.end(), s.flags.begin(), s.flags.end());
  }
  absl::Status known = args.ok() ? args->CheckKnown(known_flags) : args.status();
  if (!known.ok() || args->positional().size() != 1) {
    std::fprintf(stderr,
                 "moe bench: %s\nusage: moe bench SUITE [--preset P | --model DIR] "
                 "[--threads N] [--out FILE]\nsuites: all",
                 known.ok() ? "give one suite" : std::string(known.message()).c_str());
    for (const auto& [name, s] : suites) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  bench::SuiteOptions o;
  o.preset = args->GetOr("preset", o.preset);
  o.preset_given = args->Has("preset");
  o.model_dir = args->GetOr("model", "");
  o.arch = args->GetOr("arch", o.arch);
  o.dtype = args->GetOr("dtype", o.dtype);
  o.cache_dir = args->GetOr("cache-dir", "");
  // The one place the cache's environment variable is read (suites take SuiteOptions only).
  if (const char* env = std::getenv("MOE_BENCH_CACHE"); o.cache_dir.empty() && env != nullptr) {
    o.cache_dir = env;
  }
  o.quick = args->Has("quick");
  o.artifacts_dir = args->GetOr("artifacts", "");
  if (named != nullptr) {
    for (const std::string& f : named->flags) {
      if (auto v = args->Get(f)) o.flags[f] = *v;
    }
  }
  auto threads = args->GetInt("threads", 2);
  if (!threads.ok() || *threads < 1) {
    std::fprintf(stderr, "moe bench: --threads must be a positive integer\n");
    return 2;
  }
  o.threads = static_cast<int>(*threads);
  const std::string out = args->GetOr("out", "");

  const std::string& which = args->positional()[0];
  std::vector<const bench::Suite*> run;
  if (which == "all") {
    // --suites a,b: only those (in registry order).
    const std::string only = args->GetOr("suites", "");
    for (const auto& [name, s] : suites) {
      if (only.empty() || ("," + only + ",").find("," + name + ",") != std::string::npos) {
        run.push_back(&s);
      }
    }
    if (run.empty()) {
      std::fprintf(stderr, "moe bench all: --suites names no suite of this build\n");
      return 2;
    }
    return RunAll(*args, o, run);
  } else if (auto it = suites.find(which); it != suites.end()) {
    run.push_back(&it->second);
  } else {
    std::fprintf(stderr, "moe bench: unknown suite '%s'\n", which.c_str());
    return 2;
  }
  std::string lines;
  for (const bench::Suite* s : run) {
    auto report = s->run(o);
    if (!report.ok()) {
      std::fprintf(stderr, "moe bench %s: %s\n", s->name.c_str(),
                   std::string(report.status().message()).c_str());
      return 1;
    }
    lines += report->ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    lines += "\n";
  }
  if (out.empty() || out == "-") {
    std::fwrite(lines.data(), 1, lines.size(), stdout);
    return 0;
  }
  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr || std::fwrite(lines.data(), 1, lines.size(), f) != lines.size()) {
    std::fprintf(stderr, "moe bench: cannot write %s\n", out.c_str());
    if (f != nullptr) std::fclose(f);
    return 1;
  }
  std::fclose(f);
  std::fwrite(lines.data(), 1, lines.size(), stdout);
  return 0;
}

}  // namespace

MOE_REGISTER_COMMAND("bench", "runs a benchmark suite and prints JSON results", RunBench);

}  // namespace moe::cli
