#include "bench/common/plots.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"

namespace moe::bench {
namespace {

namespace fs = std::filesystem;

struct Series {
  std::string file;    // inside the run directory
  std::string using_;  // gnuplot `using` clause
  std::string title;
  std::string extra;  // e.g. "with lines", "axes x1y2"
  bool cdf = false;   // the file holds sorted samples: drawn as their CDF (using_ ignored)
};

struct Plot {
  std::string png;
  std::string setup;  // gnuplot commands before `plot`
  std::vector<Series> series;
};

const std::vector<std::string> kSystems = {"moe", "llama-server"};

std::vector<Plot> Table() {
  std::vector<Plot> plots;
  {
    Plot p{.png = "serve-ttft-cdf.png",
           .setup =
               "set title 'TTFT, 16 concurrent streams (short prompts, 128 output tokens)'\n"
               "set xlabel 'TTFT (ms)'\nset ylabel 'fraction of requests'\nset key bottom right\n"
               "set grid\n"};
    for (const std::string& s : kSystems) {
      p.series.push_back({"serve-c16-" + s + ".ttft.dat", "", s, "with lines lw 2", true});
    }
    plots.push_back(p);
  }
  {
    Plot p{.png = "serve-itl-cdf.png",
           .setup =
               "set title 'Inter-token latency, 16 concurrent streams'\n"
               "set xlabel 'ITL (ms, log)'\nset logscale x\nset ylabel 'fraction of gaps'\n"
               "set key bottom right\nset grid\n"};
    for (const std::string& s : kSystems) {
      p.series.push_back({"serve-c16-" + s + ".itl.dat", "", s, "with lines lw 2", true});
    }
    plots.push_back(p);
  }
  {
    Plot p{.png = "serve-load.png",
           .setup =
               "set title 'Throughput and latency vs offered load (Poisson, short prompts)'\n"
               "set xlabel 'offered rate (req/s, log)'\nset logscale x\n"
               "set ylabel 'output tok/s'\nset y2label 'p90 TTFT (ms, log)'\n"
               "set logscale y2\nset ytics nomirror\nset y2tics\nset key top left\n"
               "set grid\n"};
    for (const std::string& s : kSystems) {
      p.series.push_back(
          {"serve-sweep-" + s + ".dat", "1:3", s + " output tok/s", "with linespoints lw 2"});
      p.series.push_back({"serve-sweep-" + s + ".dat", "1:5", s + " p90 TTFT",
                          "axes x1y2 with linespoints dt 2 lw 2"});
    }
    plots.push_back(p);
  }
  {
    Plot p{.png = "serve-kv.png",
           .setup =
               "set title 'Router L1 KV usage and prefix-hit rate over each workload'\n"
               "set xlabel 'seconds into the workload'\nset ylabel 'ratio'\n"
               "set yrange [0:1.05]\nset key outside right\nset grid\n"};
    for (const std::string w : {"shared-prefix", "multi-turn", "trace"}) {
      p.series.push_back({"serve-kv-" + w + ".dat", "1:2", w + " KV usage", "with lines lw 2"});
      p.series.push_back(
          {"serve-kv-" + w + ".dat", "1:3", w + " hit rate", "with points pt 7 ps 0.5"});
    }
    plots.push_back(p);
  }
  return plots;
}

}  // namespace

PlotSet MakePlots(const std::string& dir) {
  PlotSet out;
  std::string gnuplot;
  for (const char* c : {"/usr/bin/gnuplot", "/usr/local/bin/gnuplot"}) {
    if (fs::exists(c)) gnuplot = c;
  }
  std::string script;
  std::vector<std::string> planned;
  for (const Plot& p : Table()) {
    std::vector<std::string> parts;
    std::string stats;
    for (const Series& s : p.series) {
      const fs::path f = fs::path(dir) / s.file;
      if (!fs::exists(f) || fs::file_size(f) == 0) continue;
      std::string using_ = s.using_;
      if (s.cdf) {  // sorted samples: y = rank / count
        const std::string var = absl::StrCat("S", parts.size());
        absl::StrAppend(&stats, "stats '", f.string(), "' using 1 nooutput name '", var, "'\n");
        using_ = absl::StrCat("1:(($0+1)/", var, "_records)");
      }
      parts.push_back(
          absl::StrCat("'", f.string(), "' using ", using_, " title '", s.title, "' ", s.extra));
    }
    if (parts.empty()) continue;
    absl::StrAppend(&script, "reset\n", stats,
                    "set terminal pngcairo size 1000,600 noenhanced\nset output '",
                    (fs::path(dir) / p.png).string(), "'\n", p.setup, "plot ",
                    absl::StrJoin(parts, ", \\\n  "), "\nunset output\n");
    planned.push_back(p.png);
  }
  if (planned.empty()) return out;
  const std::string gp = (fs::path(dir) / "plots.gp").string();
  std::ofstream(gp) << script;
  if (gnuplot.empty()) {
    out.skipped_reason =
        "gnuplot not installed (scripts/setup installs gnuplot-nox); plots.gp kept";
    return out;
  }
  auto r = common::process::RunToExit(
      {.argv = {gnuplot, gp}, .stderr_path = (fs::path(dir) / "plots.log").string()},
      absl::Seconds(120));
  if (!r.ok() || r->exit_code != 0) {
    out.skipped_reason = "gnuplot failed (plots.log)";
  }
  for (const std::string& png : planned) {
    if (fs::exists(fs::path(dir) / png)) out.written.push_back(png);
  }
  return out;
}

}  // namespace moe::bench
