// `moe bench experts`: aggregate decode tok/s at 32 streams, disaggregated (this
// process's engine with a RemoteExpertExecutor + 2 expert workers behind gRPC on loopback) vs
// embedded (in-process experts); the per-layer expert dispatch latency split into worker compute
// and RPC overhead; the router's dense part alone; and the balancedness an EPLB recalibration
// reaches in the placement simulation (Zipf 1.2 over 256 experts, 64 workers, 5 slots each).
//
// Threads: embedded runs `--threads`; the router gets half (at least 1) and each worker an equal
// share of the rest (at least 1), so with --threads 2 the disaggregated side has 3 compute
// threads (router 1 + 2 x 1) on 2 cores — reported as compute_threads_disagg. The disaggregated
// figure is the better of ping-pong off and on (micro_batches in the params); both are reported.
//
// Uses the small preset (f32) unless --model is given (--preset other than the default "bench"
// is honoured too).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "bench/common/suite.h"
#include "common/base/clock.h"
#include "common/base/status_macros.h"
#include "common/engine/engine.h"
#include "common/engine/generator.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/registry.h"
#include "common/model/checkpoint.h"
#include "common/model/make_model.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/expert_worker_server.h"
#include "services/router/core/placement_algorithm.h"
#include "services/router/remote_expert_executor.h"

namespace moe::bench {
namespace {

constexpr int kStreams = 32;

absl::StatusOr<std::string> Checkpoint(const SuiteOptions& o) {
  if (!o.model_dir.empty()) return o.model_dir;
  const std::string preset = o.preset == "bench" ? "small" : o.preset;
  ASSIGN_OR_RETURN(model::Preset p, model::ParsePreset(preset));
  const std::string cache = CacheDir(o);
  const std::string dir = absl::StrCat(cache, "/", preset, "-mixtral-f32-experts-v1");
  if (std::filesystem::exists(dir + "/.complete")) return dir;
  model::MakeModelOptions mo;
  mo.preset = p;
  RETURN_IF_ERROR(model::MakeModel(mo, dir));
  std::ofstream(dir + "/.complete") << "ok\n";
  return dir;
}

struct DecodeRun {
  double tok_s = 0;
  std::vector<std::vector<int32_t>> outputs;
};

// 32 greedy streams; decode tok/s over the steps after every stream has its first token.
// `on_decode_start` (optional) runs once every stream has its first token (prefill done).
absl::StatusOr<DecodeRun> Decode(const model::Checkpoint& ckpt, int threads,
                                 engine::ExpertExecutor* experts, int decode_tokens,
                                 int micro_batches = 2,
                                 const std::function<void()>& on_decode_start = nullptr) {
  engine::EngineOptions eo;
  eo.num_threads = threads;
  eo.micro_batches = micro_batches;
  eo.kv_cache_bytes = 64ll << 20;
  ASSIGN_OR_RETURN(auto eng, engine::Engine::Create(ckpt.config(), ckpt.weights(), eo, experts));
  std::vector<engine::GenerationRequest> reqs(kStreams);
  std::mt19937 rng(11);
  for (auto& r : reqs) {
    for (int i = 0; i < 16; ++i) {
      r.prompt_ids.push_back(3 + static_cast<int32_t>(rng() % (ckpt.config().vocab_size - 3)));
    }
    r.sampling.max_tokens = decode_tokens + 1;
    r.sampling.ignore_eos = true;
  }
  engine::Generator gen(eng.get(), {});
  int64_t tokens = 0;
  absl::Time first;
  auto results = gen.Generate(reqs, [&](size_t, const engine::SampledToken&) {
    if (++tokens == kStreams) {
      if (on_decode_start) on_decode_start();
      first = absl::Now();
    }
  });
  const absl::Time end = absl::Now();
  if (!results.ok()) return results.status();
  DecodeRun run;
  run.tok_s = static_cast<double>(tokens - kStreams) / absl::ToDoubleSeconds(end - first);
  for (const auto& r : *results) run.outputs.push_back(r.output_ids);
  return run;
}

// Zero-filled expert outputs at once: times the router's dense part alone (attention, gates,
// lm_head, sampling), the floor of a disaggregated step.
class NoExperts final : public engine::ExpertExecutor {
 public:
  absl::StatusOr<engine::ExpertCallHandle> Submit(const engine::ExpertCall& call) override {
    for (const engine::ExpertBatch& b : call.batches) {
      std::fill(b.output, b.output + b.num_tokens * call.hidden, 0.0f);
    }
    return 1;
  }
  absl::Status Await(engine::ExpertCallHandle) override { return absl::OkStatus(); }
};

absl::StatusOr<BenchReport> RunExpertsBench(const SuiteOptions& o) {
  BenchReport report("experts");
  ASSIGN_OR_RETURN(std::string dir, Checkpoint(o));
  const int decode_tokens = o.quick ? 8 : 48;
  const int threads = std::max(1, o.threads);

  ASSIGN_OR_RETURN(auto full, model::Checkpoint::Open(dir));
  ASSIGN_OR_RETURN(DecodeRun embedded, Decode(*full, threads, nullptr, decode_tokens));

  // Two workers, each holding half of every layer's experts; the router side keeps the
  // dense part. Threads: half to the router engine, the rest split over the workers.
  const int router_threads = std::max(1, threads / 2);
  const int worker_threads = std::max(1, (threads - router_threads) / 2);
  common::metrics::Registry registry;
  std::vector<std::unique_ptr<common::metrics::Registry>> worker_registries;
  std::vector<std::unique_ptr<expert_worker::ExpertWorkerCore>> cores;
  std::vector<std::unique_ptr<expert_worker::ExpertWorkerServer>> services;
  std::vector<std::unique_ptr<common::rpc::ServerRunner>> runners;
  router::RemoteExpertsOptions ro;
  const int64_t ne = full->config().num_experts;
  for (int w = 0; w < 2; ++w) {
    expert_worker::ExpertWorkerCoreOptions wo;
    wo.model_dir = dir;
    wo.experts = {absl::StrCat("*:", w * ne / 2, "-", (w + 1) * ne / 2 - 1)};
    wo.threads_per_call = worker_threads;
    worker_registries.push_back(std::make_unique<common::metrics::Registry>());
    ASSIGN_OR_RETURN(auto core,
                     expert_worker::ExpertWorkerCore::Create(wo, *worker_registries.back(),
                                                             common::SystemClock::Get()));
    RETURN_IF_ERROR(core->WarmUp());
    auto service = std::make_unique<expert_worker::ExpertWorkerServer>(core.get());
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    auto runner = std::make_unique<common::rpc::ServerRunner>(so);
    runner->AddService(service.get());
    RETURN_IF_ERROR(runner->Start());
    runner->SetServing(true);
    ro.workers.push_back(absl::StrCat("127.0.0.1:", runner->port()));
    ro.placement.push_back(absl::StrCat(wo.experts[0], "=", w));
    cores.push_back(std::move(core));
    services.push_back(std::move(service));
    runners.push_back(std::move(runner));
  }
  ASSIGN_OR_RETURN(auto dense, model::Checkpoint::Open(dir, model::LoadOptions::DenseOnly()));
  NoExperts no_experts;
  ASSIGN_OR_RETURN(DecodeRun dense_only,
                   Decode(*dense, router_threads, &no_experts, decode_tokens, /*micro_batches=*/1));
  ASSIGN_OR_RETURN(auto remote, router::RemoteExpertExecutor::Create(ro, full->config(), registry,
                                                                     common::SystemClock::Get()));
  // Expert-call figures of the decode steps only (prefill calls are far larger): snapshots when
  // decoding starts and when it ends.
  struct CallStats {
    double dispatch_sum = 0, dispatch_n = 0, busy = 0, worker_calls = 0;
  };
  auto snapshot = [&] {
    CallStats c;
    c.dispatch_n = registry.Value("moe_expert_layer_dispatch_seconds").value_or(0);
    c.dispatch_sum = registry.HistogramSum("moe_expert_layer_dispatch_seconds").value_or(0);
    for (auto& r : worker_registries) {
      c.busy += r->Value("moe_expert_worker_busy_seconds_total").value_or(0);
      c.worker_calls += r->Value("moe_expert_worker_calls_total").value_or(0);
    }
    return c;
  };
  struct DecodeCalls {
    double dispatch_ms = 0, compute_ms = 0, calls = 0;
  };
  auto decode_calls = [](const CallStats& a, const CallStats& b) {
    DecodeCalls d;
    d.calls = b.dispatch_n - a.dispatch_n;
    if (d.calls > 0) d.dispatch_ms = 1e3 * (b.dispatch_sum - a.dispatch_sum) / d.calls;
    if (b.worker_calls > a.worker_calls) {
      d.compute_ms = 1e3 * (b.busy - a.busy) / (b.worker_calls - a.worker_calls);
    }
    return d;
  };
  CallStats start;
  ASSIGN_OR_RETURN(DecodeRun serial, Decode(*dense, router_threads, remote.get(), decode_tokens,
                                            /*micro_batches=*/1, [&] { start = snapshot(); }));
  const DecodeCalls serial_calls = decode_calls(start, snapshot());
  ASSIGN_OR_RETURN(DecodeRun pingpong, Decode(*dense, router_threads, remote.get(), decode_tokens,
                                              /*micro_batches=*/2, [&] { start = snapshot(); }));
  const DecodeCalls pingpong_calls = decode_calls(start, snapshot());
  for (auto& r : runners) r->Shutdown(absl::Now());
  const bool identical = pingpong.outputs == embedded.outputs && serial.outputs == embedded.outputs;
  const bool pingpong_wins = pingpong.tok_s > serial.tok_s;
  const DecodeRun& best = pingpong_wins ? pingpong : serial;

  const nlohmann::json params = {{"model", dir},
                                 {"streams", kStreams},
                                 {"decode_tokens", decode_tokens},
                                 {"threads", threads},
                                 {"router_threads", router_threads},
                                 {"worker_threads", worker_threads},
                                 {"workers", 2},
                                 {"compute_threads_disagg", router_threads + 2 * worker_threads},
                                 {"micro_batches", pingpong_wins ? 2 : 1},
                                 {"identical_tokens", identical}};
  report.Add({"decode_tok_s_b32_disagg", best.tok_s, "tok/s", params,
              Baseline{"decode_tok_s_b32_embedded", embedded.tok_s}});
  report.Add({"disagg_over_embedded_throughput", best.tok_s / embedded.tok_s, "ratio", params, {}});
  report.Add({"disagg_pingpong_speedup", pingpong.tok_s / serial.tok_s, "ratio", params,
              Baseline{"decode_tok_s_b32_disagg_no_pingpong", serial.tok_s}});
  const double tokens_per_step = static_cast<double>(kStreams);
  report.Add({"router_dense_ms_per_step",
              1e3 * tokens_per_step / dense_only.tok_s,
              "ms",
              {{"what",
                "the router's dense part of one 32-token decode step alone (experts "
                "answered at once), at router_threads"},
               {"router_threads", router_threads}},
              Baseline{"embedded_ms_per_step", 1e3 * tokens_per_step / embedded.tok_s}});
  for (const auto& [suffix, c] :
       {std::pair<std::string, DecodeCalls>{"", serial_calls}, {"_pingpong", pingpong_calls}}) {
    const std::string mode = suffix.empty() ? "no ping-pong"
                                            : "ping-pong (one call per "
                                              "micro-batch)";
    report.Add({"expert_layer_dispatch_ms" + suffix,
                c.dispatch_ms,
                "ms",
                {{"what",
                  "decode steps: mean expert call from submit until every output is "
                  "back, router side, " +
                      mode},
                 {"calls", c.calls}},
                std::nullopt});
    report.Add({"expert_worker_compute_ms" + suffix,
                c.compute_ms,
                "ms",
                {{"what", "decode steps: mean compute per RunExperts call on a worker, " + mode}},
                std::nullopt});
  }
  report.Add({"expert_rpc_overhead_ms",
              serial_calls.dispatch_ms - serial_calls.compute_ms,
              "ms",
              {{"what",
                "decode steps, no ping-pong, per layer: dispatch minus worker compute "
                "(transport, wake-ups, waiting for a core)"}},
              std::nullopt});

  // Placement simulation: Zipf(1.2) over 256 experts, 64 workers x (4 + 1) slots.
  constexpr int kExperts = 256, kWorkers = 64, kSlots = 5;
  std::vector<double> load(kExperts);
  double norm = 0;
  for (int r = 1; r <= kExperts; ++r) norm += std::pow(r, -1.2);
  for (int e = 0; e < kExperts; ++e) load[e] = 1e6 * std::pow(e + 1, -1.2) / norm;
  router::LayerPlacement before(kExperts);
  for (int e = 0; e < kExperts; ++e) before[e] = {e % kWorkers};
  ASSIGN_OR_RETURN(router::LayerPlacement after, router::PlaceLayer(load, kWorkers, kSlots));
  const double b0 = router::Balancedness(router::ExpectedWorkerLoads(before, load, kWorkers));
  const double b1 = router::Balancedness(router::ExpectedWorkerLoads(after, load, kWorkers));
  report.Add({"balancedness_after_recalibration",
              b1,
              "ratio",
              {{"simulation", "zipf 1.2, 256 experts, 64 workers, 5 slots"}},
              Baseline{"balancedness_before_recalibration", b0}});
  return report;
}

}  // namespace

MOE_REGISTER_BENCH_SUITE("experts",
                         "disaggregated vs embedded decode, dispatch latency, EPLB balancedness",
                         RunExpertsBench);

}  // namespace moe::bench
