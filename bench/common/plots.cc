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

// One `plot` command: its own settings and series.
struct Panel {
  std::string setup;  // gnuplot commands before `plot`
  std::vector<Series> series;
};

struct Plot {
  std::string png;
  std::string setup;  // gnuplot commands before `plot` (before the panels' own)
  std::vector<Series> series;
  std::vector<Panel> panels;  // several: drawn side by side (multiplot), series ignored
  std::string layout;         // multiplot "set multiplot layout ..." arguments, e.g. "2,2"
  std::string size = "1000,600";
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
  {
    // The kv-store tiers: a tier's hit rate is hits / lookups that missed every tier above it.
    Plot p{.png = "serve-kv-tiers.png",
           .setup =
               "set title 'Prefix-cache hit rate per tier (cumulative), documents revisited with "
               "L1 and L2 too small to hold them'\n"
               "set xlabel 'seconds into the workload'\nset ylabel 'hits / lookups reaching the "
               "tier'\nset yrange [0:1.05]\nset key bottom right\nset grid\n"};
    for (const auto& [col, tier] : std::vector<std::pair<int, std::string>>{
             {2, "L1 (router pool)"}, {3, "L2 (kv-store RAM)"}, {4, "L3 (kv-store SSD)"}}) {
      p.series.push_back({"serve-kv-tiers.dat", absl::StrCat("1:", col), tier,
                          "with linespoints lw 2 pt 7 ps 0.6"});
    }
    plots.push_back(p);
  }
  {
    // `moe bench voice`'s per-stage medians, stacked in pipeline order; the point is the
    // measured end of speech -> first audio p50 (stages leave small gaps between them).
    Plot p{.png = "voice-stages.png",
           .setup =
               "set title 'Voice: end of speech -> first reply audio, per stage (p50)'\n"
               "set ylabel 'ms'\nset style data histograms\nset style histogram rowstacked\n"
               "set style fill solid 0.8 border -1\nset boxwidth 0.5\nset key outside right\n"
               "set yrange [0:*]\nset grid ytics\n"};
    const std::vector<std::pair<int, std::string>> stages = {{2, "endpoint wait (VAD pause)"},
                                                             {3, "ASR final"},
                                                             {4, "LLM TTFT (prefill)"},
                                                             {5, "first sentence"},
                                                             {6, "TTS first chunk"}};
    for (size_t i = 0; i < stages.size(); ++i) {
      p.series.push_back({"voice-stages.dat",
                          absl::StrCat(stages[i].first, i == 0 ? ":xtic(1)" : ""), stages[i].second,
                          ""});
    }
    p.series.push_back(
        {"voice-stages.dat", "0:7", "first audio, measured", "with points pt 7 ps 2 lc black"});
    plots.push_back(p);
  }
  {
    // Expert load before and after `moe admin calibrate-router` on a zipf-skewed model: the
    // experts' shares (the model's choice: the same before and after) and each worker's load
    // relative to the layer's mean (what the new placement evens out; 1 everywhere = balanced).
    auto panel = [](const std::string& title, const std::string& x, const std::string& file,
                    const std::string& cb) {
      return Panel{.setup = absl::StrCat("set title '", title, "'\nset xlabel '", x,
                                         "'\nset ylabel 'layer'\nset xtics 1\nset ytics 1\n"
                                         "set autoscale xfix\nset autoscale yfix\n"
                                         "set palette rgbformulae 22,13,-31\n",
                                         cb),
                   .series = {{file, "2:1:4", "", "with image notitle"}}};
    };
    const std::string share_cb = "set cbrange [0:*]\n";
    const std::string worker_cb = "set cbrange [0:*]\n";
    Plot p{.png = "serve-expert-heatmap.png",
           .setup = "set tics out\n",
           .layout =
               "2,2 title 'Expert load before and after a recalibration (zipf-skewed gates, "
               "3 expert workers)'",
           .size = "1200,900"};
    p.panels = {panel("experts: share of the layer tokens, before", "expert",
                      "serve-expert-load-before.dat", share_cb),
                panel("experts: share of the layer tokens, after", "expert",
                      "serve-expert-load-after.dat", share_cb),
                panel("workers: tokens / layer mean, before", "worker",
                      "serve-worker-load-before.dat", worker_cb),
                panel("workers: tokens / layer mean, after", "worker",
                      "serve-worker-load-after.dat", worker_cb)};
    plots.push_back(p);
  }
  return plots;
}

// `plot ...` for `series` whose files exist in `dir` ("" when none has data); CDF series add
// their `stats` commands to `stats`.
std::string PlotCommand(const std::string& dir, const std::vector<Series>& series,
                        std::string& stats, int& var_index) {
  std::vector<std::string> parts;
  for (const Series& s : series) {
    const fs::path f = fs::path(dir) / s.file;
    if (!fs::exists(f) || fs::file_size(f) == 0) continue;
    std::string using_ = s.using_;
    if (s.cdf) {  // sorted samples: y = rank / count
      const std::string var = absl::StrCat("S", var_index++);
      absl::StrAppend(&stats, "stats '", f.string(), "' using 1 nooutput name '", var, "'\n");
      using_ = absl::StrCat("1:(($0+1)/", var, "_records)");
    }
    parts.push_back(absl::StrCat("'", f.string(), "' using ", using_,
                                 s.title.empty() ? "" : absl::StrCat(" title '", s.title, "'"), " ",
                                 s.extra));
  }
  if (parts.empty()) return "";
  return absl::StrCat("plot ", absl::StrJoin(parts, ", \\\n  "), "\n");
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
    std::string stats, body;
    int vars = 0;
    if (p.panels.empty()) {
      body = PlotCommand(dir, p.series, stats, vars);
    } else {
      std::string drawn;
      for (const Panel& panel : p.panels) {
        const std::string cmd = PlotCommand(dir, panel.series, stats, vars);
        // A panel without data is left blank, so the others keep their places.
        absl::StrAppend(&drawn, "reset\n", p.setup, panel.setup,
                        cmd.empty() ? "set multiplot next\n" : cmd);
        if (!cmd.empty()) body = "x";
      }
      if (!body.empty()) {
        body = absl::StrCat("set multiplot layout ", p.layout, "\n", drawn, "unset multiplot\n");
      }
    }
    if (body.empty()) continue;
    absl::StrAppend(&script, "reset\n", stats, "set terminal pngcairo size ", p.size,
                    " noenhanced\nset output '", (fs::path(dir) / p.png).string(), "'\n",
                    p.panels.empty() ? p.setup : "", body, "unset output\n");
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
