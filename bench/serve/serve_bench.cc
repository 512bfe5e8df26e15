// `moe bench serve`: the serving system measured the way its users judge it, through the
// gateway's OpenAI API under load (workload.h, serve_stats.h, bench/common/sse_load.h).
//
// Two modes:
//   moe bench serve --url http://127.0.0.1:PORT [--workload random|shared-prefix|multi-turn|trace]
//       [--rate R | --rates R1,R2,... | --concurrency C] [--num-requests N] ...
//     drives a running server (ours or any OpenAI-compatible one on loopback) with one workload
//     and reports what `vllm bench serve` reports plus goodput (--goodput ttft:MS,tpot:MS).
//   moe bench serve [--preset small | --model DIR] [--quick]
//     the side-by-side run: our cluster (`moe up`) and llama-server (-t 2 -np 16 -c 131072) on
//     the same checkpoint (`moe export-gguf`), same load, in one run, as ratios; then embedded
//     vs disaggregated. The scenarios are kScenarios below: one entry each.
//   moe bench serve --make-trace FILE [--num-requests N --rate R ...]
//     writes a synthetic Mooncake-format trace.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/common/suite.h"
#include "bench/engine/engine_bench.h"
#include "bench/serve/expert_load.h"
#include "bench/serve/serve_client.h"
#include "bench/serve/serve_kit.h"
#include "bench/serve/serve_stats.h"
#include "bench/serve/servers.h"
#include "bench/serve/workload.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/child_process.h"
#include "nlohmann/json.hpp"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

namespace moe::bench::serve {
namespace {

namespace fs = std::filesystem;

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

// --- the suite's own flags ---

class Flags {
 public:
  explicit Flags(const std::map<std::string, std::string>& f) : f_(f) {}
  std::string Str(const std::string& k, const std::string& def) const {
    auto it = f_.find(k);
    return it == f_.end() ? def : it->second;
  }
  absl::StatusOr<double> Num(const std::string& k, double def) const {
    auto it = f_.find(k);
    if (it == f_.end()) return def;
    double v = 0;
    if (!absl::SimpleAtod(it->second, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", k, ": not a number: ", it->second));
    }
    return v;
  }
  absl::StatusOr<int> Int(const std::string& k, int def) const {
    ASSIGN_OR_RETURN(double v, Num(k, def));
    if (v != std::floor(v)) return absl::InvalidArgumentError(absl::StrCat("--", k, ": integer"));
    return static_cast<int>(v);
  }
  // "N" or "MIN:MAX".
  absl::Status Range(const std::string& k, int32_t* lo, int32_t* hi) const {
    auto it = f_.find(k);
    if (it == f_.end()) return absl::OkStatus();
    std::vector<std::string> parts = absl::StrSplit(it->second, ':');
    int a = 0, b = 0;
    if (parts.size() == 1 && absl::SimpleAtoi(parts[0], &a)) {
      *lo = *hi = a;
    } else if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &a) &&
               absl::SimpleAtoi(parts[1], &b)) {
      *lo = a;
      *hi = b;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", k, ": N or MIN:MAX, got ", it->second));
    }
    return absl::OkStatus();
  }
  bool Has(const std::string& k) const { return f_.count(k) > 0; }

 private:
  const std::map<std::string, std::string>& f_;
};

struct Scenario {
  const char* name;
  absl::Status (*run)(Ctx&, Systems&);
};
// In run order; a new scenario is one entry here. kv-tiers and recalibration start clusters
// of their own (ours and llama-server stay up, idle, meanwhile).
constexpr Scenario kScenarios[] = {
    {"c16", Concurrency16}, {"prefix", PrefixWarmCold},
    {"sweep", RateSweep},   {"workloads", SharedPrefixWorkloads},
    {"kv-tiers", KvTiers},  {"recalibration", Recalibration},
};

// --- the two modes ---

absl::StatusOr<int32_t> VocabSize(const std::string& model_dir) {
  std::ifstream in(fs::path(model_dir) / "config.json");
  nlohmann::json c = nlohmann::json::parse(in, nullptr, false);
  if (c.is_discarded() || !c.contains("vocab_size")) {
    return absl::InvalidArgumentError(absl::StrCat(model_dir, "/config.json: no vocab_size"));
  }
  return c["vocab_size"].get<int32_t>();
}

absl::StatusOr<BenchReport> SideBySide(const SuiteOptions& options, const Slo& slo) {
  SuiteOptions o = options;
  // Defined on the small preset (8192-token context); an explicit preset or model is honoured.
  if (o.model_dir.empty() && o.preset == "bench") o.preset = "small";
  std::string dir = o.model_dir;
  if (dir.empty()) {
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(o));
  }
  BenchReport report("serve");
  Ctx ctx{.options = o, .report = report, .slo = slo};
  ASSIGN_OR_RETURN(ctx.vocab_size, VocabSize(dir));
  const std::string moe = SelfDir() + "/moe";
  const std::string work =
      o.artifacts_dir.empty() ? (fs::path(CacheDir(o)) / "serve").string() : o.artifacts_dir;
  ctx.moe = moe;
  ctx.model_dir = dir;
  ctx.work = work;
  fs::create_directories(work);
  const std::string gguf =
      (fs::path(work) / (fs::path(dir).filename().string() + ".gguf")).string();

  Progress("starting our cluster (moe up)");
  // Fresh kv-store L3: the prefix scenario's documents are the same in every run, and an earlier
  // run's blocks on disk would make its "cold" TTFT an L3 hit.
  ASSIGN_OR_RETURN(RunningServer ours,
                   StartCluster({.moe_binary = moe,
                                 .model_dir = dir,
                                 .router_threads = o.threads,
                                 .stderr_path = (fs::path(work) / "moe-up.log").string(),
                                 .work_dir = work,
                                 .name = "0",
                                 .fresh_data = true}));
  Flags flags(o.flags);
  const std::string llama_bin = flags.Str(
      "llama-server", std::string(MOE_SOURCE_DIR) + "/bench/llamacpp/.native/bin/llama-server");
  std::optional<RunningServer> theirs;
  std::string llama_missing;
  if (absl::Status s = ExportGguf(moe, dir, gguf); !s.ok()) {
    llama_missing = absl::StrCat("moe export-gguf: ", s.message());
  } else {
    Progress("starting llama-server");
    auto started =
        StartLlamaServer({.binary = llama_bin,
                          .gguf = gguf,
                          .threads = o.threads,
                          .stderr_path = (fs::path(work) / "llama-server.log").string()});
    if (started.ok()) {
      theirs = std::move(*started);
    } else {
      llama_missing = std::string(started.status().message());
    }
  }
  if (!llama_missing.empty()) {
    Progress("no side-by-side: " + llama_missing);
    report.Add({.name = "serve_side_by_side_skipped",
                .value = 1,
                .unit = "flag",
                .params = {{"reason", llama_missing}}});
  }
  Systems sys{.ours = &ours, .theirs = theirs ? &*theirs : nullptr};
  // One warm-up request each (page cache, first allocations).
  for (RunningServer* s : sys.Both()) {
    ASSIGN_OR_RETURN(auto warm, ShortPrompts(ctx, 2, 8, 8, 99));
    RunWorkload(s->port, s->model, warm, {.max_concurrency = 2, .timeout_s = 120});
  }
  // --scenarios NAME,...: only those (and the topology comparison only when named "topology").
  const std::string only = flags.Str("scenarios", "");
  const std::vector<std::string> wanted = absl::StrSplit(only, ',', absl::SkipEmpty());
  auto want = [&](const std::string& name) {
    return wanted.empty() || std::find(wanted.begin(), wanted.end(), name) != wanted.end();
  };
  for (const std::string& w : wanted) {
    bool known = w == "topology";
    for (const Scenario& sc : kScenarios) known = known || w == sc.name;
    if (!known) return absl::InvalidArgumentError(absl::StrCat("--scenarios: unknown '", w, "'"));
  }
  absl::Status status;
  for (const Scenario& sc : kScenarios) {
    if (!want(sc.name)) continue;
    Progress(absl::StrCat("scenario ", sc.name));
    status = sc.run(ctx, sys);
    if (!status.ok()) break;
  }
  if (theirs) theirs->Stop();
  ours.Stop();
  RETURN_IF_ERROR(status);
  if (!want("topology")) return report;

  // Embedded vs disaggregated (router 1 thread + 2 workers x 1 thread, as `moe bench experts`).
  Progress("starting the disaggregated cluster (1 router + 2 expert workers)");
  ASSIGN_OR_RETURN(RunningServer disagg,
                   StartCluster({.moe_binary = moe,
                                 .model_dir = dir,
                                 .router_threads = 1,
                                 .expert_workers = 2,
                                 .worker_threads = 1,
                                 .stderr_path = (fs::path(work) / "moe-up-disagg.log").string(),
                                 .work_dir = work}));
  ASSIGN_OR_RETURN(RunningServer embedded,
                   StartCluster({.moe_binary = moe,
                                 .model_dir = dir,
                                 .router_threads = o.threads,
                                 .stderr_path = (fs::path(work) / "moe-up-embedded.log").string(),
                                 .work_dir = work}));
  // Two rounds, the topologies taking turns, A B then B A (MeasureInTurns).
  const int per_round = o.quick ? 16 : 32;
  ASSIGN_OR_RETURN(
      std::vector<TurnsMeasured> m,
      MeasureInTurns(ctx, {&embedded, &disagg}, 2, "topology-c16",
                     [&](int round) { return ShortPrompts(ctx, per_round, 64, 64, 17 + round); },
                     {.max_concurrency = 16, .timeout_s = 600}, {{"output_tokens", 64}},
                     {"output_tok_s", "ttft_ms_p50", "itl_ms_p50"}));
  const double tok[2] = {m[0].decode_tok_s, m[1].decode_tok_s};
  disagg.Stop();
  embedded.Stop();
  // value = disaggregated, baseline = embedded: ratio = disaggregated / embedded.
  report.Add({.name = "serve_decode_tok_s_disagg",
              .value = tok[1],
              .unit = "tok/s",
              .params = {{"disagg", "router 1 thread + 2 expert workers x 1 thread"},
                         {"embedded", absl::StrCat("router ", o.threads, " threads")},
                         {"streams", 16},
                         {"output_tokens", 64},
                         {"through", "the gateway's OpenAI API"}},
              .baseline = Baseline{"serve_decode_tok_s_embedded", tok[0]}});
  return report;
}

absl::StatusOr<BenchReport> AgainstUrl(const SuiteOptions& o, const Slo& slo) {
  Flags f(o.flags);
  const std::string url = f.Str("url", "");
  // Loopback only: this tool is never pointed at another machine.
  int port = 0;
  for (const char* prefix : {"http://127.0.0.1:", "http://localhost:"}) {
    if (url.rfind(prefix, 0) == 0) port = std::atoi(url.c_str() + std::strlen(prefix));
  }
  if (port <= 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--url must be http://127.0.0.1:PORT (loopback only), got '", url, "'"));
  }
  std::string model = f.Str("served-model", "");
  if (model.empty()) {
    auto r = common::http::HttpCall(port, "GET", "/v1/models");
    nlohmann::json j = r ? nlohmann::json::parse(r->body, nullptr, false) : nlohmann::json();
    if (!j.is_object() || !j.contains("data") || j["data"].empty()) {
      return absl::UnavailableError(absl::StrCat(url, "/v1/models gave no model (is it up?)"));
    }
    model = j["data"][0].value("id", "");
  }
  ASSIGN_OR_RETURN(int n, f.Int("num-requests", 64));
  ASSIGN_OR_RETURN(int concurrency, f.Int("concurrency", 0));
  ASSIGN_OR_RETURN(double rate, f.Num("rate", 0));
  ASSIGN_OR_RETURN(double burstiness, f.Num("burstiness", 1));
  ASSIGN_OR_RETURN(int seed, f.Int("seed", 1));
  ASSIGN_OR_RETURN(int vocab, f.Int("vocab", 1024));
  ASSIGN_OR_RETURN(int shared_prefix, f.Int("shared-prefix", 0));
  const std::string workload = f.Str("workload", f.Has("trace") ? "trace" : "random");
  RandomWorkloadOptions ro{.num_requests = n,
                           .input_min = 32,
                           .input_max = 256,
                           .output_min = 64,
                           .output_max = 128,
                           .shared_prefix = shared_prefix,
                           .vocab_size = vocab,
                           .seed = static_cast<uint64_t>(seed)};
  RETURN_IF_ERROR(f.Range("input-len", &ro.input_min, &ro.input_max));
  RETURN_IF_ERROR(f.Range("output-len", &ro.output_min, &ro.output_max));
  auto build = [&]() -> absl::StatusOr<std::vector<ServeRequest>> {
    if (workload == "random") return RandomWorkload(ro);
    if (workload == "shared-prefix") {
      RandomWorkloadOptions so = ro;
      if (!f.Has("shared-prefix")) so.shared_prefix = 1024;
      return RandomWorkload(so);
    }
    if (workload == "multi-turn") {
      ASSIGN_OR_RETURN(int turns, f.Int("turns", 4));
      return MultiTurnWorkload({.num_chats = std::max(1, n / std::max(1, turns)),
                                .turns = turns,
                                .system_tokens = f.Has("shared-prefix") ? shared_prefix : 512,
                                .user_tokens = ro.input_min,
                                .output_tokens = ro.output_min,
                                .vocab_size = vocab,
                                .seed = static_cast<uint64_t>(seed)});
    }
    if (workload == "trace") {
      const std::string path = f.Str("trace", "");
      std::vector<TraceEntry> trace;
      if (path.empty()) {
        ASSIGN_OR_RETURN(trace, SyntheticTrace({.num_requests = n,
                                                .rate = rate > 0 ? rate : 2,
                                                .seed = static_cast<uint64_t>(seed)}));
      } else {
        std::ifstream in(path);
        if (!in) return absl::NotFoundError(absl::StrCat("--trace: cannot read ", path));
        std::stringstream ss;
        ss << in.rdbuf();
        ASSIGN_OR_RETURN(trace, ParseMooncakeTrace(ss.str()));
      }
      ASSIGN_OR_RETURN(double scale, f.Num("time-scale", 1));
      ASSIGN_OR_RETURN(int max_input, f.Int("max-input", 0));
      ASSIGN_OR_RETURN(int max_output, f.Int("max-output", 0));
      return TraceToRequests(trace, {.time_scale = scale,
                                     .max_input = max_input,
                                     .max_output = max_output,
                                     .vocab_size = vocab,
                                     .seed = static_cast<uint64_t>(seed)});
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--workload: random, shared-prefix, multi-turn or trace, got '", workload, "'"));
  };
  std::vector<double> rates;
  if (f.Has("rates")) {
    for (absl::string_view part : absl::StrSplit(f.Str("rates", ""), ',', absl::SkipEmpty())) {
      double r = 0;
      if (!absl::SimpleAtod(part, &r) || !(r > 0)) {
        return absl::InvalidArgumentError(absl::StrCat("--rates: bad rate '", part, "'"));
      }
      rates.push_back(r);
    }
  } else {
    rates.push_back(rate);  // 0: closed loop (or the trace's own timestamps)
  }
  BenchReport report("serve");
  SuiteOptions ctx_options = o;
  Ctx ctx{.options = ctx_options, .report = report, .slo = slo};
  RunningServer target{.system = f.Str("name", "target"), .port = port, .model = model};
  for (double r : rates) {
    ASSIGN_OR_RETURN(std::vector<ServeRequest> reqs, build());
    if (workload != "trace" && r > 0) {
      const std::vector<double> at = PoissonArrivals(static_cast<int>(reqs.size()), r, burstiness,
                                                     static_cast<uint64_t>(seed) + 1);
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i].after < 0) reqs[i].arrival_s = at[i];
      }
    }
    Measure(ctx, target, workload, reqs, {.max_concurrency = concurrency, .timeout_s = 3600},
            {{"rate", r > 0 ? nlohmann::json(r) : nlohmann::json("inf")},
             {"burstiness", burstiness},
             {"url", url}});
  }
  target.child.reset();
  return report;
}

absl::StatusOr<BenchReport> RunServeSuite(const SuiteOptions& o) {
  Flags f(o.flags);
  Slo slo{.ttft_ms = 1000, .tpot_ms = 100};
  if (f.Has("goodput") && !Slo::Parse(f.Str("goodput", ""), &slo)) {
    return absl::InvalidArgumentError(
        "--goodput: KEY:MS[,KEY:MS] with keys ttft, tpot, e2el (e.g. ttft:1000,tpot:100)");
  }
  if (f.Has("make-trace")) {
    ASSIGN_OR_RETURN(int n, f.Int("num-requests", 64));
    ASSIGN_OR_RETURN(double rate, f.Num("rate", 2));
    ASSIGN_OR_RETURN(int seed, f.Int("seed", 1));
    SyntheticTraceOptions to{.num_requests = n, .rate = rate, .seed = static_cast<uint64_t>(seed)};
    RETURN_IF_ERROR(f.Range("input-len", &to.input_min, &to.input_max));
    RETURN_IF_ERROR(f.Range("output-len", &to.output_min, &to.output_max));
    ASSIGN_OR_RETURN(to.num_prefixes, f.Int("num-prefixes", to.num_prefixes));
    ASSIGN_OR_RETURN(to.prefix_share, f.Num("prefix-share", to.prefix_share));
    ASSIGN_OR_RETURN(auto trace, SyntheticTrace(to));
    const std::string path = f.Str("make-trace", "");
    std::ofstream out(path);
    out << FormatMooncakeTrace(trace);
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
    BenchReport report("serve");
    report.Add({.name = "trace_requests",
                .value = static_cast<double>(trace.size()),
                .unit = "requests",
                .params = {{"file", path}, {"rate", rate}}});
    return report;
  }
  if (f.Has("url")) return AgainstUrl(o, slo);
  return SideBySide(o, slo);
}

const std::vector<std::string> kServeFlags = {
    "url",          "workload",     "rate",         "rates",         "concurrency",
    "num-requests", "input-len",    "output-len",   "shared-prefix", "turns",
    "trace",        "time-scale",   "max-input",    "max-output",    "burstiness",
    "goodput",      "seed",         "vocab",        "served-model",  "name",
    "make-trace",   "num-prefixes", "prefix-share", "llama-server",  "scenarios"};

}  // namespace

MOE_REGISTER_BENCH_SUITE_EX("serve",
                            "serving through the OpenAI API: load generator; side by side with "
                            "llama-server; embedded vs disaggregated",
                            RunServeSuite, kServeFlags, 2400, 900);

}  // namespace moe::bench::serve
