// `moe bench SUITE [--preset P | --model DIR] [--threads N] [--out FILE]` (DESIGN.md §6).
// Also: --arch A and --dtype D (for presets; default mixtral, bf16), --cache-dir DIR (generated
// presets are kept there between runs; default $MOE_BENCH_CACHE, else bench::kDefaultCacheDir),
// --quick (fewer iterations). `moe bench all` runs every suite this build has and writes one
// JSON line per suite.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/suite.h"
#include "tools/moe/command.h"

namespace moe::cli {
namespace {

int RunBench(const Args& /*parsed*/, const std::vector<std::string>& argv) {
  auto args = Args::Parse(argv, {"quick"});
  auto& suites = bench::Suites();
  std::vector<std::string> known_flags = {"preset",    "model", "threads",  "out",      "arch",
                                          "dtype",     "cache-dir", "quick", "artifacts"};
  // A suite's own flags (`moe bench serve --url ...`) are known when that suite is named.
  const bench::Suite* named = nullptr;
  if (args.ok() && args->positional().size() == 1) {
    if (auto it = suites.find(args->positional()[0]); it != suites.end()) named = &it->second;
  }
  if (named != nullptr) known_flags.insert(known_flags.end(), named->flags.begin(), named->flags.end());
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
    for (const auto& [name, s] : suites) run.push_back(&s);
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
