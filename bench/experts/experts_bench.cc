// `moe bench experts`: aggregate decode tok/s at 32 streams, embedded (in-process experts) vs
// disaggregated (this process's engine with a RemoteExpertExecutor + 2 expert workers) over
// gRPC on loopback and over shared memory, measured in alternating rounds in one run; the
// per-layer expert dispatch latency split into worker compute and transport overhead, per
// transport; the router's dense part alone; and the balancedness an EPLB recalibration reaches
// in the placement simulation (Zipf 1.2 over 256 experts, 64 workers, 5 slots each).
//
// Threads: at most --threads compute threads are runnable at once in every configuration.
// Embedded runs --threads. Disaggregated, the router's engine runs --threads and each worker
// --threads / 2 (at least 1): with micro-batch ping-pong off, the router waits (asleep, after
// the transports' bounded spins) while the workers compute and the workers wait while the
// router computes, so the phases alternate on the same cores (README "Threads"). Ping-pong would
// run both at once, so it is not measured here.
//
// Models: the small preset (f32) unless --preset bench (the bench preset, --dtype, default
// bf16) or --model is given.
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
#include "bench/engine/engine_bench.h"
#include "common/base/clock.h"
#include "common/base/status_macros.h"
#include "common/engine/engine.h"
#include "common/engine/generator.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/registry.h"
#include "common/model/checkpoint.h"
#include "common/model/make_model.h"
#include "common/shm/handshake.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/core/shm_server.h"
#include "services/expert-worker/expert_worker_server.h"
#include "services/router/core/placement_algorithm.h"
#include "services/router/remote_expert_executor.h"

namespace moe::bench {
namespace {

constexpr int kStreams = 32;

absl::StatusOr<std::string> Checkpoint(const SuiteOptions& o) {
  if (!o.model_dir.empty()) return o.model_dir;
  if (o.preset_given && o.preset != "small") return PresetCheckpoint(o);
  ASSIGN_OR_RETURN(model::Preset p, model::ParsePreset("small"));
  const std::string dir = absl::StrCat(CacheDir(o), "/small-mixtral-f32-experts-v1");
  if (std::filesystem::exists(dir + "/.complete")) return dir;
  model::MakeModelOptions mo;
  mo.preset = p;
  RETURN_IF_ERROR(model::MakeModel(mo, dir));
  std::ofstream(dir + "/.complete") << "ok\n";
  return dir;
}

double LoadAverage() {
  std::ifstream f("/proc/loadavg");
  double one = 0;
  f >> one;
  return one;
}

struct DecodeRun {
  double tok_s = 0;
  std::vector<std::vector<int32_t>> outputs;
};

// 32 greedy streams; decode tok/s over the steps after every stream has its first token.
// `on_decode` (optional) runs with true once every stream has its first token (prefill done)
// and with false when decoding ends.
absl::StatusOr<DecodeRun> Decode(const model::Checkpoint& ckpt, int threads,
                                 engine::ExpertExecutor* experts, int decode_tokens,
                                 const std::function<void(bool)>& on_decode = nullptr) {
  engine::EngineOptions eo;
  eo.num_threads = threads;
  eo.micro_batches = 1;
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
      if (on_decode) on_decode(true);
      first = absl::Now();
    }
  });
  const absl::Time end = absl::Now();
  if (on_decode) on_decode(false);
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

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}
double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

// Per-layer expert call samples of the decode steps of one transport (all rounds).
struct LayerSamples {
  bool collecting = false;
  std::vector<double> dispatch_ms, compute_ms, overhead_ms;
  // Shared memory only: dispatch minus the union of the workers' compute intervals, the union
  // over the longest compute (1 = the workers ran side by side, 2 = they took turns), and the
  // longest hand-off of the call each way.
  std::vector<double> overhead_busy_ms, union_over_max, to_worker_us, to_router_us;
  void Observe(const router::ExpertCallTiming& t) {
    if (!collecting) return;
    const double d = absl::ToDoubleMilliseconds(t.dispatch);
    const double c = absl::ToDoubleMilliseconds(t.max_compute);
    dispatch_ms.push_back(d);
    compute_ms.push_back(c);
    overhead_ms.push_back(d - c);
    if (t.shm_calls > 0 && t.grpc_calls == 0) {
      const double u = absl::ToDoubleMilliseconds(t.shm_compute_union);
      overhead_busy_ms.push_back(d - u);
      if (c > 0) union_over_max.push_back(u / c);
      to_worker_us.push_back(absl::ToDoubleMicroseconds(t.shm_to_worker_max));
      to_router_us.push_back(absl::ToDoubleMicroseconds(t.shm_to_router_max));
    }
  }
};

struct Config {
  std::string name;  // embedded, grpc, shm
  engine::ExpertExecutor* experts = nullptr;
  LayerSamples* samples = nullptr;
  std::vector<double> tok_s;
  bool identical = true;
};

absl::StatusOr<BenchReport> RunExpertsBench(const SuiteOptions& o) {
  BenchReport report("experts");
  ASSIGN_OR_RETURN(std::string dir, Checkpoint(o));
  const int decode_tokens = o.quick ? 8 : 48;
  const int rounds = o.quick ? 1 : 3;
  const int threads = std::max(1, o.threads);
  const int router_threads = threads;
  const int worker_threads = std::max(1, threads / 2);
  const double load_before = LoadAverage();

  ASSIGN_OR_RETURN(auto full, model::Checkpoint::Open(dir));
  // Two workers, each holding half of every layer's experts, serving gRPC and shared memory.
  std::vector<std::unique_ptr<common::metrics::Registry>> worker_registries;
  std::vector<std::unique_ptr<expert_worker::ExpertWorkerCore>> cores;
  std::vector<std::unique_ptr<expert_worker::CoreCallHandler>> handlers;
  std::vector<std::unique_ptr<expert_worker::ShmServer>> shm_servers;
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
    ASSIGN_OR_RETURN(auto core, expert_worker::ExpertWorkerCore::Create(
                                    wo, *worker_registries.back(), common::SystemClock::Get()));
    RETURN_IF_ERROR(core->WarmUp());
    auto handler = std::make_unique<expert_worker::CoreCallHandler>(*core);
    ASSIGN_OR_RETURN(auto shm_server,
                     expert_worker::ShmServer::Start({}, *handler, *worker_registries.back(),
                                                     common::SystemClock::Get()));
    auto service = std::make_unique<expert_worker::ExpertWorkerServer>(core.get());
    service->EnableSharedMemory(*shm_server, shm::HostBootId());
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    auto runner = std::make_unique<common::rpc::ServerRunner>(so);
    runner->AddService(service.get());
    RETURN_IF_ERROR(runner->Start());
    runner->SetServing(true);
    ro.workers.push_back(absl::StrCat("127.0.0.1:", runner->port()));
    ro.placement.push_back(absl::StrCat(wo.experts[0], "=", w));
    cores.push_back(std::move(core));
    handlers.push_back(std::move(handler));
    shm_servers.push_back(std::move(shm_server));
    services.push_back(std::move(service));
    runners.push_back(std::move(runner));
  }
  ASSIGN_OR_RETURN(auto dense, model::Checkpoint::Open(dir, model::LoadOptions::DenseOnly()));
  NoExperts no_experts;
  ASSIGN_OR_RETURN(DecodeRun dense_only,
                   Decode(*dense, router_threads, &no_experts, decode_tokens));
  common::metrics::Registry grpc_registry, shm_registry;
  ro.transport = router::ExpertTransport::kGrpc;
  ASSIGN_OR_RETURN(auto grpc, router::RemoteExpertExecutor::Create(
                                  ro, full->config(), grpc_registry, common::SystemClock::Get()));
  ro.transport = router::ExpertTransport::kShm;
  ASSIGN_OR_RETURN(auto shm, router::RemoteExpertExecutor::Create(ro, full->config(), shm_registry,
                                                                  common::SystemClock::Get()));
  for (int w = 0; w < 2; ++w) {
    if (shm->transport(w) != "shm") {
      return absl::FailedPreconditionError(absl::StrCat("worker ", w, " is not on shm"));
    }
  }
  LayerSamples grpc_samples, shm_samples;
  grpc->set_call_observer([&](const router::ExpertCallTiming& t) { grpc_samples.Observe(t); });
  shm->set_call_observer([&](const router::ExpertCallTiming& t) { shm_samples.Observe(t); });

  std::vector<Config> configs = {{"embedded", nullptr, nullptr},
                                 {"grpc", grpc.get(), &grpc_samples},
                                 {"shm", shm.get(), &shm_samples}};
  std::vector<std::vector<int32_t>> reference;
  // Alternating rounds: each round measures every configuration once, so slow drifts of the
  // machine (other builds) hit all of them alike; ratios are taken within a round.
  std::vector<double> ratio_grpc, ratio_shm;
  for (int r = 0; r < rounds; ++r) {
    for (Config& c : configs) {
      const bool remote = c.experts != nullptr;
      ASSIGN_OR_RETURN(DecodeRun run, Decode(remote ? *dense : *full, router_threads, c.experts,
                                             decode_tokens, [&c](bool on) {
                                               if (c.samples != nullptr) c.samples->collecting = on;
                                             }));
      if (reference.empty()) reference = run.outputs;
      c.identical = c.identical && run.outputs == reference;
      c.tok_s.push_back(run.tok_s);
    }
    ratio_grpc.push_back(configs[1].tok_s.back() / configs[0].tok_s.back());
    ratio_shm.push_back(configs[2].tok_s.back() / configs[0].tok_s.back());
  }
  for (auto& runner : runners) runner->Shutdown(absl::Now());
  const double load_after = LoadAverage();

  auto range = [](const std::vector<double>& v) {
    return nlohmann::json::array(
        {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())});
  };
  const nlohmann::json threads_json = {
      {"embedded", threads},
      {"router", router_threads},
      {"worker", worker_threads},
      {"workers", 2},
      {"compute_threads_runnable_max", threads},
      {"note",
       "router and workers alternate (micro_batches 1): the router waits asleep while the "
       "workers compute and the workers wait asleep while it computes"}};
  const nlohmann::json common_params = {{"model", dir},
                                        {"streams", kStreams},
                                        {"decode_tokens", decode_tokens},
                                        {"rounds", rounds},
                                        {"threads", threads_json},
                                        {"micro_batches", 1},
                                        {"load_average_1m", {load_before, load_after}}};
  report.Add({"decode_tok_s_b32_embedded",
              Median(configs[0].tok_s),
              "tok/s",
              {{"range", range(configs[0].tok_s)}, {"threads", threads}},
              std::nullopt});
  for (int i : {1, 2}) {
    const Config& c = configs[i];
    const std::vector<double>& ratios = i == 1 ? ratio_grpc : ratio_shm;
    nlohmann::json params = common_params;
    params["transport"] = c.name;
    params["identical_tokens"] = c.identical;
    params["range"] = range(c.tok_s);
    report.Add({"decode_tok_s_b32_disagg", Median(c.tok_s), "tok/s", params,
                Baseline{"decode_tok_s_b32_embedded", Median(configs[0].tok_s)}});
    params["range"] = range(ratios);
    params["what"] = "median over rounds of disagg / embedded tok/s measured in the same round";
    report.Add({"disagg_over_embedded_throughput", Median(ratios), "ratio", params, {}});
    const LayerSamples& s = *c.samples;
    nlohmann::json layer = {
        {"transport", c.name},
        {"calls", s.overhead_ms.size()},
        {"p90", Percentile(s.overhead_ms, 0.9)},
        {"mean", s.overhead_ms.empty()
                     ? 0.0
                     : std::accumulate(s.overhead_ms.begin(), s.overhead_ms.end(), 0.0) /
                           static_cast<double>(s.overhead_ms.size())},
        {"what",
         "decode steps, per layer call: dispatch (submit until every "
         "output is back) minus the longest worker compute of the call, p50"}};
    report.Add({"expert_rpc_overhead_ms", Median(s.overhead_ms), "ms", layer, std::nullopt});
    if (!s.to_worker_us.empty()) {
      // Where the shared-memory overhead goes: the two hand-offs (wake-ups included) and the
      // time no worker computed; on a machine whose cores are busy with other work the
      // workers take turns and "dispatch minus the longest compute" counts the turn taking.
      report.Add({"expert_shm_handoff_us",
                  Median(s.to_worker_us) + Median(s.to_router_us),
                  "us",
                  {{"to_worker_p50", Median(s.to_worker_us)},
                   {"to_worker_p90", Percentile(s.to_worker_us, 0.9)},
                   {"to_router_p50", Median(s.to_router_us)},
                   {"to_router_p90", Percentile(s.to_router_us, 0.9)},
                   {"what",
                    "decode steps, per layer call, p50 of the longest hand-off each way: the "
                    "router began writing the request -> the worker read it, the worker "
                    "published the answer -> the router read it (CLOCK_MONOTONIC)"}},
                  std::nullopt});
      report.Add({"expert_shm_overhead_busy_ms",
                  Median(s.overhead_busy_ms),
                  "ms",
                  {{"compute_union_over_max_p50", Median(s.union_over_max)},
                   {"what",
                    "decode steps, per layer call, p50: dispatch minus the time at least one "
                    "worker computed (the union of their compute intervals); "
                    "compute_union_over_max is 1 when the workers ran side by side and 2 when "
                    "they took turns"}},
                  std::nullopt});
    }
    report.Add({"expert_layer_dispatch_ms",
                Median(s.dispatch_ms),
                "ms",
                {{"transport", c.name}, {"what", "decode steps: per layer call, p50"}},
                std::nullopt});
    report.Add({"expert_worker_compute_ms",
                Median(s.compute_ms),
                "ms",
                {{"transport", c.name},
                 {"what", "decode steps: longest worker compute per layer call, p50"}},
                std::nullopt});
  }
  const double tokens_per_step = static_cast<double>(kStreams);
  report.Add({"router_dense_ms_per_step",
              1e3 * tokens_per_step / dense_only.tok_s,
              "ms",
              {{"what",
                "the router's dense part of one 32-token decode step alone (experts "
                "answered at once), at router_threads"},
               {"router_threads", router_threads}},
              Baseline{"embedded_ms_per_step", 1e3 * tokens_per_step / Median(configs[0].tok_s)}});

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
                         "embedded vs disaggregated (gRPC, shared memory) decode, dispatch "
                         "overhead per transport, EPLB balancedness",
                         RunExpertsBench);

}  // namespace moe::bench
