#include "bench/common/run_all.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/common/bench_report.h"
#include "bench/common/goals.h"
#include "bench/common/plots.h"
#include "common/process/child_process.h"
#include "nlohmann/json.hpp"

namespace moe::bench {
namespace {

namespace fs = std::filesystem;
using common::process::ChildProcess;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last non-empty line of a log that is not a progress percentage.
std::string LastLine(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    std::string l(absl::StripAsciiWhitespace(*it));
    if (!l.empty() && l.back() != '%') return l.size() > 400 ? l.substr(0, 400) : l;
  }
  return "no output";
}

}  // namespace

absl::StatusOr<std::vector<SuiteRun>> RunAllSuites(const RunAllOptions& o,
                                                   const std::vector<const Suite*>& suites) {
  std::error_code ec;
  fs::create_directories(o.dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", o.dir, ": ", ec.message()));
  nlohmann::json all = BenchReport("all").ToJson();
  all["results"] = nlohmann::json::array();
  all["suites"] = nlohmann::json::array();
  all["quick"] = o.quick;
  std::vector<SuiteRun> runs;
  const absl::Time start = absl::Now();
  for (size_t k = 0; k < suites.size(); ++k) {
    const Suite& s = *suites[k];
    SuiteRun run{.name = s.name};
    run.budget_s = static_cast<int>((o.quick ? s.quick_budget_s : s.budget_s) * o.budget_scale);
    const std::string out = (fs::path(o.dir) / (s.name + ".json")).string();
    const std::string log = (fs::path(o.dir) / (s.name + ".log")).string();
    std::vector<std::string> argv = {o.moe_binary, "bench",       s.name, "--out",
                                     out,          "--artifacts", o.dir};
    argv.insert(argv.end(), o.suite_args.begin(), o.suite_args.end());
    if (o.quick) argv.push_back("--quick");
    for (const std::string& f : s.flags) {
      if (auto it = o.suite_flags.find(f); it != o.suite_flags.end()) {
        argv.push_back("--" + f);
        argv.push_back(it->second);
      }
    }
    std::fprintf(stderr, "moe bench all: [%zu/%zu] %s (budget %d s)...\n", k + 1, suites.size(),
                 s.name.c_str(), run.budget_s);
    std::fflush(stderr);
    const absl::Time t0 = absl::Now();
    auto child = ChildProcess::Spawn({.argv = argv, .stderr_path = log});
    if (!child.ok()) {
      run.reason = std::string(child.status().message());
    } else {
      (*child)->DrainStdout();
      auto code = (*child)->Wait(absl::Seconds(run.budget_s));
      if (!code.ok()) {
        (*child)->Stop(absl::Seconds(10));
        run.reason = absl::StrCat("over budget (", run.budget_s, " s); stopped");
      } else if (*code != 0) {
        run.reason = LastLine(ReadAll(log));
      } else {
        nlohmann::json report = nlohmann::json::parse(ReadAll(out), nullptr, false);
        if (report.is_discarded() || !report.contains("results")) {
          run.reason = absl::StrCat("no JSON report in ", out);
        } else {
          run.ok = true;
          for (nlohmann::json r : report["results"]) {
            r["params"]["suite"] = s.name;
            all["results"].push_back(std::move(r));
            ++run.results;
          }
        }
      }
    }
    run.seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    std::fprintf(stderr, "moe bench all: [%zu/%zu] %s %s in %.1f s%s%s\n", k + 1, suites.size(),
                 s.name.c_str(), run.ok ? "ok" : "skipped", run.seconds,
                 run.ok ? absl::StrCat(" (", run.results, " results)").c_str() : ": ",
                 run.ok ? "" : run.reason.c_str());
    std::fflush(stderr);
    all["suites"].push_back({{"name", run.name},
                             {"status", run.ok ? "ok" : "skipped"},
                             {"reason", run.reason},
                             {"seconds", run.seconds},
                             {"budget_s", run.budget_s},
                             {"results", run.results}});
    runs.push_back(std::move(run));
  }
  all["goals"] = ApplyGoals(Goals(), all["results"], all["suites"]);
  int met = 0, missed = 0, open = 0;
  for (const nlohmann::json& g : all["goals"]) {
    if (g["met"].is_boolean()) {
      (g["met"].get<bool>() ? met : missed) += 1;
    } else {
      ++open;
    }
  }
  std::fprintf(stderr, "moe bench all: goals: %d met, %d missed, %d not judged (results.json)\n",
               met, missed, open);
  PlotSet plots = MakePlots(o.dir);
  all["plots"] = plots.written;
  if (!plots.skipped_reason.empty()) all["plots_skipped"] = plots.skipped_reason;
  all["seconds"] = absl::ToDoubleSeconds(absl::Now() - start);
  const std::string path = (fs::path(o.dir) / "results.json").string();
  std::ofstream f(path);
  f << all.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  if (!f) return absl::InternalError(absl::StrCat("cannot write ", path));
  std::fprintf(stderr, "moe bench all: %s (%zu plots%s%s), %.0f s\n", path.c_str(),
               plots.written.size(), plots.skipped_reason.empty() ? "" : "; ",
               plots.skipped_reason.c_str(), all["seconds"].get<double>());
  return runs;
}

}  // namespace moe::bench
