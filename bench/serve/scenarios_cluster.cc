// `moe bench serve`'s side-by-side scenarios (serve_kit.h): shared-prefix / multi-turn / trace
// workloads, and the scenarios on clusters of their own: the kv-store tiers, a live router
// recalibration.
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
#include "bench/serve/serve_kit.h"
#include "common/base/status_macros.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/child_process.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {

namespace fs = std::filesystem;

// One shared 1k-token system prompt; multi-turn chats; a synthetic Mooncake trace. Router KV
// usage and L1 prefix hit rate are sampled during our runs.
absl::Status SharedPrefixWorkloads(Ctx& ctx, Systems& sys) {
  const int n = ctx.options.quick ? 16 : 48;
  ASSIGN_OR_RETURN(auto shared, RandomWorkload({.num_requests = n,
                                                .input_min = 32,
                                                .input_max = 128,
                                                .output_min = 32,
                                                .output_max = 32,
                                                .shared_prefix = 1024,
                                                .vocab_size = ctx.vocab_size,
                                                .seed = 31}));
  const std::vector<double> at = PoissonArrivals(n, 4, 1, 32);
  for (int i = 0; i < n; ++i) shared[i].arrival_s = at[i];
  ASSIGN_OR_RETURN(auto chats, MultiTurnWorkload({.num_chats = ctx.options.quick ? 4 : 8,
                                                  .turns = 4,
                                                  .system_tokens = 512,
                                                  .user_tokens = 64,
                                                  .output_tokens = 32,
                                                  .vocab_size = ctx.vocab_size,
                                                  .seed = 33}));
  ASSIGN_OR_RETURN(auto trace, SyntheticTrace({.num_requests = ctx.options.quick ? 16 : 48,
                                               .rate = 4,
                                               .num_prefixes = 4,
                                               .prefix_blocks = 2,
                                               .input_min = 256,
                                               .input_max = 2048,
                                               .output_min = 16,
                                               .output_max = 64,
                                               .seed = 34}));
  ASSIGN_OR_RETURN(auto replay, TraceToRequests(trace, {.vocab_size = ctx.vocab_size, .seed = 35}));
  if (!ctx.options.artifacts_dir.empty()) {
    WriteFile((fs::path(ctx.options.artifacts_dir) / "serve-synthetic-trace.jsonl").string(),
              FormatMooncakeTrace(trace));
  }
  const Keep keep = {"request_throughput", "output_tok_s", "ttft_ms_p50", "ttft_ms_p90",
                     "tpot_ms_p50",        "itl_ms_p50",   "e2e_ms_p90",  "goodput"};
  struct Load {
    const char* name;
    const std::vector<ServeRequest>* requests;
    LoadOptions load;
    nlohmann::json params;
  };
  const std::vector<Load> loads = {
      {"shared-prefix",
       &shared,
       {.max_concurrency = 0, .timeout_s = 600},
       {{"system_tokens", 1024}, {"unique_tokens", "32-128"}, {"rate", 4}}},
      {"multi-turn",
       &chats,
       {.max_concurrency = 0, .timeout_s = 600},
       {{"chats", ctx.options.quick ? 4 : 8}, {"turns", 4}, {"system_tokens", 512}}},
      {"trace",
       &replay,
       {.max_concurrency = 0, .timeout_s = 600},
       {{"trace", "synthetic Mooncake format"}, {"rate", 4}, {"block_tokens", kTraceBlockTokens}}},
  };
  // --quick runs these on our cluster only (llama-server's share of a quick run is the three
  // Must-show figures).
  const std::vector<RunningServer*> systems =
      ctx.options.quick ? std::vector<RunningServer*>{sys.ours} : sys.Both();
  for (const Load& l : loads) {
    for (RunningServer* s : systems) {
      KvSampler sampler(s == sys.ours ? s->router_metrics_ports : std::vector<int>{},
                        absl::Milliseconds(200));
      nlohmann::json params = l.params;
      Measured m = Measure(ctx, *s, l.name, *l.requests, l.load, params, keep);
      sampler.Stop();
      if (s == sys.ours && !s->router_metrics_ports.empty()) {
        ctx.report.Add({.name = "serve_prefix_hit_rate_l1",
                        .value = sampler.HitRate(),
                        .unit = "ratio",
                        .params = {{"scenario", l.name},
                                   {"system", s->system},
                                   {"peak_kv_usage_l1", sampler.PeakUsage()},
                                   {"method",
                                    "moe_prefix_cache_hits_total / queries_total "
                                    "{tier=l1} over the run (router /metrics)"}}});
        if (!ctx.options.artifacts_dir.empty()) {
          WriteFile(
              (fs::path(ctx.options.artifacts_dir) / absl::StrCat("serve-kv-", l.name, ".dat"))
                  .string(),
              sampler.Table());
        }
      }
    }
  }
  return absl::OkStatus();
}

// Documents revisited with L1 and L2 too small to hold them all, on a cluster of its own: the
// router's L1 pool is 96 blocks (16 tokens each: about two 512-token documents besides the one
// running), the kv-store's L2 10 MiB (about five), L3 in a fresh directory (all twelve). The 12
// documents are first read once in turn (cold), then each request picks one by its recency rank
// (LRU stack distance): 0-1 mostly hits L1, 2-4 L2, 5-11 L3. Each request is a document + a new
// 16-token question, 8 output tokens, one at a time. The tier hit rates come from the router's
// moe_prefix_cache_{hits,queries}_total{tier} (a tier's queries are the lookups that missed
// every tier above it).
absl::Status KvTiers(Ctx& ctx, Systems&) {
  constexpr int kDocs = 12, kDocTokens = 512, kL1Blocks = 96;
  constexpr int64_t kL2Bytes = 10 << 20;
  const int revisits = ctx.options.quick ? 24 : 60;
  ASSIGN_OR_RETURN(auto docs, RandomWorkload({.num_requests = kDocs,
                                              .input_min = kDocTokens,
                                              .input_max = kDocTokens,
                                              .output_min = 8,
                                              .output_max = 8,
                                              .vocab_size = ctx.vocab_size,
                                              .seed = 41}));
  ASSIGN_OR_RETURN(auto questions, RandomWorkload({.num_requests = kDocs + revisits,
                                                   .input_min = 16,
                                                   .input_max = 16,
                                                   .output_min = 8,
                                                   .output_max = 8,
                                                   .vocab_size = ctx.vocab_size,
                                                   .seed = 42}));
  std::vector<int> recency;  // doc ids, most recent first
  std::vector<int> order;
  for (int d = 0; d < kDocs; ++d) order.push_back(d);
  // Stack distances in a fixed, seeded order: a third each for L1, L2 and L3 ranges.
  std::mt19937 rng(43);
  for (int i = 0; i < revisits; ++i) {
    const int band = i % 3;
    const int lo = band == 0 ? 0 : band == 1 ? 2 : 5, hi = band == 0 ? 1 : band == 1 ? 4 : 11;
    order.push_back(-1 - std::uniform_int_distribution<int>(lo, hi)(rng));  // a distance
  }
  std::shuffle(order.begin() + kDocs, order.end(), rng);
  std::vector<ServeRequest> requests;
  for (size_t i = 0; i < order.size(); ++i) {
    int doc = order[i];
    if (doc < 0) doc = recency[std::min<size_t>(-1 - doc, recency.size() - 1)];
    recency.erase(std::remove(recency.begin(), recency.end(), doc), recency.end());
    recency.insert(recency.begin(), doc);
    ServeRequest r;
    r.prompt = docs[doc].prompt;
    r.prompt.insert(r.prompt.end(), questions[i].prompt.begin(), questions[i].prompt.end());
    r.max_tokens = 8;
    requests.push_back(std::move(r));
  }
  Progress("kv-tiers: starting a cluster with a small L1 and L2");
  ASSIGN_OR_RETURN(
      RunningServer c,
      StartCluster({.moe_binary = ctx.moe,
                    .model_dir = ctx.model_dir,
                    .router_threads = ctx.options.threads,
                    .stderr_path = (fs::path(ctx.work) / "moe-up-kv-tiers.log").string(),
                    .work_dir = ctx.work,
                    .name = "kv-tiers",
                    .fresh_data = true,
                    .router_args = {"--set", absl::StrCat("core.kv_num_blocks=", kL1Blocks)},
                    .kv_store_args = {"--set", absl::StrCat("core.l2_bytes=", kL2Bytes)}}));
  // 50 ms: the revisits that hit a cache take well under a second in all.
  KvSampler sampler(c.router_metrics_ports, absl::Milliseconds(50));
  std::vector<RequestOutcome> out =
      RunWorkload(c.port, c.model, requests, {.max_concurrency = 1, .timeout_s = 600});
  sampler.Stop();
  c.Stop();
  const ServeSummary summary = Summarize(out, ctx.slo);
  if (!ctx.options.artifacts_dir.empty()) {
    WriteFile((fs::path(ctx.options.artifacts_dir) / "serve-kv-tiers.dat").string(),
              sampler.TierTable());
  }
  const nlohmann::json params = {{"scenario", "kv-tiers"},
                                 {"system", c.system},
                                 {"documents", kDocs},
                                 {"document_tokens", kDocTokens},
                                 {"requests", requests.size()},
                                 {"failed", summary.failed},
                                 {"l1_blocks", kL1Blocks},
                                 {"l2_bytes", kL2Bytes},
                                 {"method",
                                  "moe_prefix_cache_hits_total / queries_total {tier} over the "
                                  "run (router /metrics); a tier's queries missed every tier "
                                  "above it"}};
  for (int t = 0; t < 3; ++t) {
    nlohmann::json p = params;
    p["queries_blocks"] = sampler.Queries(t);
    ctx.report.Add({.name = absl::StrCat("serve_prefix_hit_rate_l", t + 1),
                    .value = sampler.HitRate(t),
                    .unit = "ratio",
                    .params = p});
  }
  Progress(absl::StrCat("kv-tiers: hit rate L1 ", sampler.HitRate(0), ", L2 ", sampler.HitRate(1),
                        ", L3 ", sampler.HitRate(2), "; ", summary.failed, " failed"));
  if (summary.failed > 0) {
    return absl::InternalError(absl::StrCat("kv-tiers: ", summary.failed,
                                            " requests failed, first: ", summary.first_error));
  }
  return absl::OkStatus();
}

// `moe <args...>`'s first stdout line (the admin commands print JSON lines).
absl::StatusOr<std::string> MoeLine(const Ctx& ctx, std::vector<std::string> args,
                                    const std::string& log) {
  args.insert(args.begin(), ctx.moe);
  ASSIGN_OR_RETURN(
      auto r, common::process::RunToExit({.argv = args, .stderr_path = log}, absl::Seconds(120)));
  if (r.exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(args[1], " ", args[2], " exited ", r.exit_code, " (", log, ")"));
  }
  return std::string(r.stdout_text.substr(0, r.stdout_text.find('\n')));
}

// Expert load before and after a recalibration, live: a cluster of 1 router + 3 expert workers
// on a zipf:1.2 gate-skewed small model; 16 streams of short prompts (phase 1), `moe admin
// calibrate-router` (the operator's own command), the same load again (phase 2). Each
// phase's load is the difference of `moe admin stats` before and after it. Figure:
// balancedness_after_recalibration_live = the worst layer's measured worker balancedness in
// phase 2 (what the coordinator judges), baseline phase 1's.
absl::Status Recalibration(Ctx& ctx, Systems&) {
  const std::string model_dir = (fs::path(CacheDir(ctx.options)) / "serve-small-zipf1.2").string();
  if (!fs::exists(fs::path(model_dir) / ".complete")) {
    Progress("recalibration: making the zipf:1.2 small model");
    model::MakeModelOptions mo;
    mo.preset = model::Preset::kSmall;
    mo.gate_skew = 1.2;
    RETURN_IF_ERROR(model::MakeModel(mo, model_dir));
    std::ofstream(fs::path(model_dir) / ".complete") << "ok\n";
  }
  Progress("recalibration: starting 1 router + 3 expert workers");
  ASSIGN_OR_RETURN(
      RunningServer c,
      StartCluster({.moe_binary = ctx.moe,
                    .model_dir = model_dir,
                    .router_threads = 1,
                    .expert_workers = 3,
                    .worker_threads = 1,
                    .stderr_path = (fs::path(ctx.work) / "moe-up-recalibration.log").string(),
                    .work_dir = ctx.work,
                    .name = "recalibration",
                    .fresh_data = true}));
  if (c.router_grpc_ports.empty()) return absl::InternalError("moe up named no router gRPC port");
  const std::string routers = absl::StrCat("127.0.0.1:", c.router_grpc_ports[0]);
  const std::string log = (fs::path(ctx.work) / "moe-admin.log").string();
  auto stats = [&]() -> absl::StatusOr<ExpertLoad> {
    ASSIGN_OR_RETURN(
        std::string line,
        MoeLine(ctx, {"admin", "stats", "--routers", routers, "--window", "900s"}, log));
    return ParseAdminStats(line);
  };
  const int n = ctx.options.quick ? 16 : 48;
  int failed[2] = {0, 0};
  std::vector<ExpertLoad> samples;
  nlohmann::json calibration;
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(auto warm, ShortPrompts(ctx, 2, 4, 4, 52));
    RunWorkload(c.port, c.model, warm, {.max_concurrency = 2, .timeout_s = 120});
    for (int phase = 0; phase < 2; ++phase) {
      // Fresh prompts per phase (same lengths), so phase 2 does not skip prefill in L1.
      ASSIGN_OR_RETURN(auto reqs, ShortPrompts(ctx, n, 32, 32, 53 + phase));
      ASSIGN_OR_RETURN(ExpertLoad s0, stats());
      if (phase == 0) samples.push_back(s0);
      const ServeSummary x = Summarize(
          RunWorkload(c.port, c.model, reqs, {.max_concurrency = 16, .timeout_s = 600}), ctx.slo);
      failed[phase] = x.failed;
      ASSIGN_OR_RETURN(ExpertLoad s1, stats());
      samples.push_back(s1);
      if (phase == 0) {
        Progress("recalibration: moe admin calibrate-router");
        ASSIGN_OR_RETURN(
            std::string line,
            MoeLine(ctx, {"admin", "calibrate-router", "--routers", routers, "--window", "900s"},
                    log));
        calibration = nlohmann::json::parse(line, nullptr, false);
        if (calibration.is_discarded()) {
          return absl::InternalError("calibrate-router printed no JSON: " + line);
        }
      }
    }
    return absl::OkStatus();
  }();
  c.Stop();
  RETURN_IF_ERROR(status);
  ASSIGN_OR_RETURN(ExpertLoad before, LoadBetween(samples[0], samples[1]));
  ASSIGN_OR_RETURN(ExpertLoad after, LoadBetween(samples[1], samples[2]));
  const std::vector<double> b0 = WorkerBalancedness(before), b1 = WorkerBalancedness(after);
  if (!ctx.options.artifacts_dir.empty()) {
    const fs::path dir = ctx.options.artifacts_dir;
    WriteFile((dir / "serve-expert-load-before.dat").string(), ExpertLoadTable(before));
    WriteFile((dir / "serve-expert-load-after.dat").string(), ExpertLoadTable(after));
    WriteFile((dir / "serve-worker-load-before.dat").string(), WorkerLoadTable(before));
    WriteFile((dir / "serve-worker-load-after.dat").string(), WorkerLoadTable(after));
  }
  const double min0 = *std::min_element(b0.begin(), b0.end());
  const double min1 = *std::min_element(b1.begin(), b1.end());
  ctx.report.Add(
      {.name = "balancedness_after_recalibration_live",
       .value = min1,
       .unit = "ratio",
       .params = {{"scenario", "recalibration"},
                  {"cluster", "1 router (1 thread) + 3 expert workers (1 thread each)"},
                  {"model", "small, moe make-model --gate-skew zipf:1.2"},
                  {"requests_per_phase", n},
                  {"streams", 16},
                  {"output_tokens", 32},
                  {"measured_before", b0},
                  {"measured_after", b1},
                  {"expected_before", calibration.value("balancedness_before", nlohmann::json())},
                  {"expected_after", calibration.value("balancedness_after", nlohmann::json())},
                  {"placement_version", calibration.value("version", nlohmann::json())},
                  {"experts_loaded", calibration.value("experts_loaded", nlohmann::json())},
                  {"failed_before", failed[0]},
                  {"failed_after", failed[1]},
                  {"method",
                   "worst layer's mean / max tokens per worker in each phase (moe admin stats "
                   "before - after the phase); recalibrated by moe admin calibrate-router"}},
       .baseline = Baseline{"balancedness_before_recalibration_live", min0}});
  Progress(absl::StrCat("recalibration: worst-layer balancedness ", min0, " -> ", min1, "; ",
                        failed[0] + failed[1], " failed"));
  return absl::OkStatus();
}

}  // namespace moe::bench::serve
