// `moe bench rpc`: where a RunExperts round trip's time goes (disaggregated decode spends about
// as long per layer waiting on the network path as computing). Two in-process expert
// workers on loopback (as `moe bench experts`), each holding half of every layer's experts of the
// small preset (f32); one "layer" sends one RunExperts to each worker at once and waits for both,
// as the router's RemoteExpertExecutor does. Reported per variant: p50 / p99 / mean of that layer
// round trip and the mean worker compute per call, so overhead = round trip - compute.
//
// Variants (name = client/server):
//   client  callback  gRPC callback API; the caller blocks on an absl::Mutex until both are done
//           cq        a CompletionQueue owned and polled (Next) by the calling thread
//           executor  the production router::RemoteExpertExecutor (Submit + Await)
//   server  sync      a synchronous service computing on gRPC's sync-server thread
//           inline    a callback service computing on the gRPC thread that read the request
//           handoff   a callback service handing each call to a compute thread of its own
//           prod      the production expert_worker::ExpertWorkerServer
//           shm       the same, with its shared-memory data plane (ShmServer); the executor
//                     requires it (experts.transport shm): no gRPC on the data path
// Payloads: "decode" = 32 streams x top-2 over 8 experts (4 experts x 8 tokens per worker,
// 32 KiB of f32 each way per call), "tiny" = 1 expert x 1 token per worker (1 KiB).
// Last, one callback/inline round trip after quiet gaps of 1.00-1.10 s, without and then with
// common/grpc/callback_queue_keeper.h (gRPC 1.51's callback queue sleeps 100 ms after an idle
// second): rpc_after_idle_round_trip_us_max_{no_keeper,keeper}.
// Variants alternate round-robin in short blocks so machine noise hits them alike.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/common/suite.h"
#include "common/base/clock.h"
#include "common/base/status_macros.h"
#include "common/grpc/callback_queue_keeper.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/registry.h"
#include "common/shm/handshake.h"
#include "grpcpp/client_context.h"
#include "grpcpp/completion_queue.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/core/shm_server.h"
#include "services/expert-worker/expert_worker_server.h"
#include "services/router/remote_expert_executor.h"

namespace moe::bench {

// bench/engine's preset cache (linked into the CLI whole-archive).
absl::StatusOr<std::string> PresetCheckpoint(const SuiteOptions& options);

namespace {

namespace pb = ::moe::expert_worker::v1;
using expert_worker::ExpertWorkerCore;

constexpr int kWorkers = 2;

class SyncService final : public pb::ExpertWorker::Service {
 public:
  explicit SyncService(ExpertWorkerCore* core) : core_(core) {}
  ::grpc::Status RunExperts(::grpc::ServerContext*, const pb::RunExpertsRequest* request,
                            pb::RunExpertsResponse* response) override {
    return expert_worker::HandleRunExperts(*core_, *request, response);
  }

 private:
  ExpertWorkerCore* const core_;
};

class InlineCallbackService final : public pb::ExpertWorker::CallbackService {
 public:
  explicit InlineCallbackService(ExpertWorkerCore* core) : core_(core) {}
  ::grpc::ServerUnaryReactor* RunExperts(::grpc::CallbackServerContext* ctx,
                                         const pb::RunExpertsRequest* request,
                                         pb::RunExpertsResponse* response) override {
    ::grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    r->Finish(expert_worker::HandleRunExperts(*core_, *request, response));
    return r;
  }

 private:
  ExpertWorkerCore* const core_;
};

// A callback service handing each call to one compute thread of its own (the cost of a hop).
class HandoffCallbackService final : public pb::ExpertWorker::CallbackService {
 public:
  explicit HandoffCallbackService(ExpertWorkerCore* core)
      : core_(core), thread_([this] { Loop(); }) {}
  ~HandoffCallbackService() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  ::grpc::ServerUnaryReactor* RunExperts(::grpc::CallbackServerContext* ctx,
                                         const pb::RunExpertsRequest* request,
                                         pb::RunExpertsResponse* response) override {
    ::grpc::ServerUnaryReactor* r = ctx->DefaultReactor();
    absl::MutexLock lock(&mu_);
    queue_.push_back({r, request, response});
    return r;
  }

 private:
  struct Job {
    ::grpc::ServerUnaryReactor* reactor;
    const pb::RunExpertsRequest* request;
    pb::RunExpertsResponse* response;
  };
  void Loop() {
    for (;;) {
      Job job;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](HandoffCallbackService* s) { return s->stop_ || !s->queue_.empty(); }, this));
        if (queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
      }
      job.reactor->Finish(expert_worker::HandleRunExperts(*core_, *job.request, job.response));
    }
  }
  ExpertWorkerCore* const core_;
  absl::Mutex mu_;
  std::deque<Job> queue_;
  bool stop_ = false;
  std::thread thread_;
};

struct Worker {
  std::unique_ptr<common::metrics::Registry> registry;
  std::unique_ptr<ExpertWorkerCore> core;
  std::unique_ptr<expert_worker::CoreCallHandler> handler;  // "shm" only
  std::unique_ptr<expert_worker::ShmServer> shm;            // "shm" only
  std::unique_ptr<::grpc::Service> service;
  std::unique_ptr<common::rpc::ServerRunner> runner;
  std::unique_ptr<pb::ExpertWorker::Stub> stub;
  std::string address;
  std::string expert_spec;
};

struct Server {
  std::string name;
  std::vector<Worker> workers;
  std::unique_ptr<common::metrics::Registry> registry =
      std::make_unique<common::metrics::Registry>();
  std::unique_ptr<router::RemoteExpertExecutor> executor;
};

absl::StatusOr<Server> StartServer(const std::string& name, const std::string& dir,
                                   const model::ModelConfig& config) {
  Server s;
  s.name = name;
  router::RemoteExpertsOptions ro;
  const int64_t ne = config.num_experts;
  for (int w = 0; w < kWorkers; ++w) {
    Worker wk;
    expert_worker::ExpertWorkerCoreOptions wo;
    wo.model_dir = dir;
    wk.expert_spec = absl::StrCat("*:", w * ne / kWorkers, "-", (w + 1) * ne / kWorkers - 1);
    wo.experts = {wk.expert_spec};
    wk.registry = std::make_unique<common::metrics::Registry>();
    ASSIGN_OR_RETURN(wk.core,
                     ExpertWorkerCore::Create(wo, *wk.registry, common::SystemClock::Get()));
    RETURN_IF_ERROR(wk.core->WarmUp());
    if (name == "sync") {
      wk.service = std::make_unique<SyncService>(wk.core.get());
    } else if (name == "handoff") {
      wk.service = std::make_unique<HandoffCallbackService>(wk.core.get());
    } else if (name == "inline") {
      wk.service = std::make_unique<InlineCallbackService>(wk.core.get());
    } else {
      auto service = std::make_unique<expert_worker::ExpertWorkerServer>(wk.core.get());
      if (name == "shm") {
        wk.handler = std::make_unique<expert_worker::CoreCallHandler>(*wk.core);
        ASSIGN_OR_RETURN(wk.shm, expert_worker::ShmServer::Start({}, *wk.handler, *wk.registry,
                                                                 common::SystemClock::Get()));
        service->EnableSharedMemory(*wk.shm, shm::HostBootId());
      }
      wk.service = std::move(service);
    }
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    wk.runner = std::make_unique<common::rpc::ServerRunner>(so);
    wk.runner->AddService(wk.service.get());
    RETURN_IF_ERROR(wk.runner->Start());
    wk.runner->SetServing(true);
    wk.address = absl::StrCat("127.0.0.1:", wk.runner->port());
    ASSIGN_OR_RETURN(auto channel, common::rpc::CreateChannel(wk.address));
    wk.stub = pb::ExpertWorker::NewStub(channel);
    ro.workers.push_back(wk.address);
    ro.placement.push_back(absl::StrCat(wk.expert_spec, "=", w));
    s.workers.push_back(std::move(wk));
  }
  if (name == "shm") ro.transport = router::ExpertTransport::kShm;
  ASSIGN_OR_RETURN(s.executor, router::RemoteExpertExecutor::Create(ro, config, *s.registry,
                                                                    common::SystemClock::Get()));
  return s;
}

// One layer's inputs: per worker, `experts` experts x `tokens` rows of the model's hidden size.
struct Payload {
  std::string name;
  int experts_per_worker = 0;
  int tokens = 0;
  std::vector<std::vector<float>> in, out;  // per batch (worker-major)
  engine::ExpertCall call;                  // over in/out, for the executor
};

Payload MakePayload(const std::string& name, const model::ModelConfig& config, int experts,
                    int tokens) {
  Payload p;
  p.name = name;
  p.experts_per_worker = experts;
  p.tokens = tokens;
  const int64_t hidden = config.hidden_size;
  p.call.layer_idx = 0;
  p.call.hidden = hidden;
  const int64_t ne = config.num_experts;
  for (int w = 0; w < kWorkers; ++w) {
    for (int e = 0; e < experts; ++e) {
      std::vector<float> x(static_cast<size_t>(tokens * hidden));
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i + e) % 23);
      p.in.push_back(std::move(x));
      p.out.emplace_back(static_cast<size_t>(tokens * hidden));
    }
  }
  size_t i = 0;
  for (int w = 0; w < kWorkers; ++w) {
    for (int e = 0; e < experts; ++e, ++i) {
      p.call.batches.push_back(
          {static_cast<int32_t>(w * ne / kWorkers + e), tokens, p.in[i].data(), p.out[i].data()});
    }
  }
  return p;
}

// Built per call, as the router does (the activations are copied into the request).
pb::RunExpertsRequest BuildRequest(const Payload& p, int w) {
  pb::RunExpertsRequest req;
  req.set_layer_idx(p.call.layer_idx);
  const int64_t hidden = p.call.hidden;
  for (int e = 0; e < p.experts_per_worker; ++e) {
    const engine::ExpertBatch& b =
        p.call.batches[static_cast<size_t>(w * p.experts_per_worker + e)];
    pb::ExpertBatch* out = req.add_batches();
    out->set_expert_id(b.expert_id);
    auto* a = out->mutable_activations();
    a->set_dtype(moe::common::v1::DTYPE_F32);
    a->add_shape(b.num_tokens);
    a->add_shape(hidden);
    a->set_data(b.input, static_cast<size_t>(b.num_tokens * hidden) * sizeof(float));
  }
  return req;
}

absl::Status CopyOut(const Payload& p, int w, const pb::RunExpertsResponse& resp) {
  if (resp.outputs_size() != p.experts_per_worker) return absl::InternalError("outputs");
  for (int e = 0; e < p.experts_per_worker; ++e) {
    const engine::ExpertBatch& b =
        p.call.batches[static_cast<size_t>(w * p.experts_per_worker + e)];
    const std::string& d = resp.outputs(e).outputs().data();
    std::memcpy(b.output, d.data(), d.size());
  }
  return absl::OkStatus();
}

absl::Status LayerCallback(Server& s, const Payload& p) {
  struct Call {
    ::grpc::ClientContext ctx;
    pb::RunExpertsRequest req;
    pb::RunExpertsResponse resp;
    ::grpc::Status status;
  };
  Call calls[kWorkers];
  absl::Mutex mu;
  int remaining = kWorkers;
  for (int w = 0; w < kWorkers; ++w) {
    calls[w].req = BuildRequest(p, w);
    calls[w].ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    s.workers[w].stub->async()->RunExperts(&calls[w].ctx, &calls[w].req, &calls[w].resp,
                                           [&, w](::grpc::Status st) {
                                             calls[w].status = std::move(st);
                                             absl::MutexLock lock(&mu);
                                             --remaining;
                                           });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](int* r) { return *r == 0; }, &remaining));
  }
  for (int w = 0; w < kWorkers; ++w) {
    if (!calls[w].status.ok()) return absl::InternalError(calls[w].status.error_message());
    RETURN_IF_ERROR(CopyOut(p, w, calls[w].resp));
  }
  return absl::OkStatus();
}

absl::Status LayerCq(Server& s, const Payload& p, ::grpc::CompletionQueue& cq) {
  struct Call {
    ::grpc::ClientContext ctx;
    pb::RunExpertsResponse resp;
    ::grpc::Status status;
    std::unique_ptr<::grpc::ClientAsyncResponseReader<pb::RunExpertsResponse>> reader;
  };
  Call calls[kWorkers];
  for (int w = 0; w < kWorkers; ++w) {
    const pb::RunExpertsRequest req = BuildRequest(p, w);
    calls[w].ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    calls[w].reader = s.workers[w].stub->AsyncRunExperts(&calls[w].ctx, req, &cq);
    calls[w].reader->Finish(&calls[w].resp, &calls[w].status, &calls[w]);
  }
  for (int n = 0; n < kWorkers; ++n) {
    void* tag = nullptr;
    bool ok = false;
    if (!cq.Next(&tag, &ok)) return absl::InternalError("cq shut down");
  }
  for (int w = 0; w < kWorkers; ++w) {
    if (!calls[w].status.ok()) return absl::InternalError(calls[w].status.error_message());
    RETURN_IF_ERROR(CopyOut(p, w, calls[w].resp));
  }
  return absl::OkStatus();
}

absl::Status LayerExecutor(Server& s, const Payload& p) {
  ASSIGN_OR_RETURN(engine::ExpertCallHandle h, s.executor->Submit(p.call));
  return s.executor->Await(h);
}

struct Samples {
  std::vector<double> us;
  double busy_s = 0, calls = 0;
};

double WorkerBusy(const Server& s, double* calls) {
  double busy = 0;
  *calls = 0;
  for (const Worker& w : s.workers) {
    busy += w.registry->Value("moe_expert_worker_busy_seconds_total").value_or(0);
    *calls += w.registry->Value("moe_expert_worker_calls_total").value_or(0);
  }
  return busy;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

absl::StatusOr<BenchReport> RunRpcBench(const SuiteOptions& o) {
  BenchReport report("rpc");
  std::string dir = o.model_dir;
  if (dir.empty()) {
    SuiteOptions po = o;
    po.preset = o.preset == "bench" ? "small" : o.preset;
    po.dtype = "f32";
    ASSIGN_OR_RETURN(dir, PresetCheckpoint(po));
  }
  ASSIGN_OR_RETURN(auto ckpt, model::Checkpoint::Open(dir, model::LoadOptions::DenseOnly()));
  const model::ModelConfig& config = ckpt->config();

  const int64_t per_worker = std::max<int64_t>(1, config.num_experts / kWorkers);
  // Decode at 32 streams, top-2: 64 rows over num_experts experts.
  const int decode_experts = static_cast<int>(std::min<int64_t>(4, per_worker));
  const int decode_tokens = static_cast<int>(32 * 2 / (decode_experts * kWorkers));
  std::vector<Payload> payloads;
  payloads.push_back(MakePayload("decode", config, decode_experts, decode_tokens));
  payloads.push_back(MakePayload("tiny", config, 1, 1));

  std::vector<std::pair<std::string, std::string>> variants = {
      {"callback", "sync"},    {"cq", "sync"},    {"callback", "inline"}, {"cq", "inline"},
      {"callback", "handoff"}, {"cq", "handoff"}, {"executor", "prod"},   {"executor", "shm"},
  };
  // MOE_BENCH_RPC_VARIANTS="cq/inline,executor/prod" keeps only those (for perf stat / record).
  if (const char* only = std::getenv("MOE_BENCH_RPC_VARIANTS"); only != nullptr && *only != 0) {
    const std::vector<std::string> keep = absl::StrSplit(only, ',');
    std::erase_if(variants, [&](const auto& v) {
      return std::find(keep.begin(), keep.end(), absl::StrCat(v.first, "/", v.second)) ==
             keep.end();
    });
  }
  if (const char* only = std::getenv("MOE_BENCH_RPC_PAYLOADS"); only != nullptr && *only != 0) {
    const std::vector<std::string> keep = absl::StrSplit(only, ',');
    std::erase_if(payloads, [&](const Payload& p) {
      return std::find(keep.begin(), keep.end(), p.name) == keep.end();
    });
  }
  // Only the servers some variant uses: every server's gRPC threads poll (epoll1 shares one
  // poller set per process), so an idle server still takes part in the others' traffic.
  std::map<std::string, Server> servers;
  for (const auto& [client, server] : variants) {
    if (servers.count(server) > 0) continue;
    ASSIGN_OR_RETURN(Server s, StartServer(server, dir, config));
    servers.emplace(server, std::move(s));
  }
  const int blocks = o.quick ? 2 : 10;
  const int per_block = o.quick ? 20 : 100;
  ::grpc::CompletionQueue cq;
  for (const Payload& p : payloads) {
    std::map<std::string, Samples> samples;
    for (int b = -1; b < blocks; ++b) {  // block -1 warms every variant up, unrecorded
      for (const auto& [client, server] : variants) {
        Server& s = servers.at(server);
        Samples& out = samples[absl::StrCat(client, "/", server)];
        double calls0 = 0;
        const double busy0 = WorkerBusy(s, &calls0);
        for (int i = 0; i < per_block; ++i) {
          const absl::Time t0 = absl::Now();
          absl::Status st = client == "callback" ? LayerCallback(s, p)
                            : client == "cq"     ? LayerCq(s, p, cq)
                                                 : LayerExecutor(s, p);
          const absl::Duration took = absl::Now() - t0;
          RETURN_IF_ERROR(st);
          if (b >= 0) out.us.push_back(absl::ToDoubleMicroseconds(took));
        }
        if (b >= 0) {
          double calls1 = 0;
          out.busy_s += WorkerBusy(s, &calls1) - busy0;
          out.calls += calls1 - calls0;
        }
      }
    }
    for (const auto& [name, sm] : samples) {
      double mean = 0;
      for (double v : sm.us) mean += v;
      mean /= static_cast<double>(sm.us.size());
      const double compute_us = sm.calls > 0 ? 1e6 * sm.busy_s / sm.calls : 0;
      const nlohmann::json params = {
          {"variant", name},
          {"payload", p.name},
          {"experts_per_worker", p.experts_per_worker},
          {"tokens_per_expert", p.tokens},
          {"bytes_per_call", p.experts_per_worker * p.tokens * config.hidden_size * 4},
          {"workers", kWorkers},
          {"layers", sm.us.size()},
          {"p99_us", Percentile(sm.us, 0.99)},
          {"mean_us", mean},
          {"worker_compute_us", compute_us}};
      report.Add({absl::StrCat("rpc_layer_round_trip_us_p50_", p.name, "_", name),
                  Percentile(sm.us, 0.5), "us", params, std::nullopt});
      std::fprintf(stderr, "%-8s %-18s p50 %7.1f  p99 %7.1f  mean %7.1f  compute %6.1f us\n",
                   p.name.c_str(), name.c_str(), Percentile(sm.us, 0.5), Percentile(sm.us, 0.99),
                   mean, compute_us);
    }
  }
  // After a quiet second: gRPC 1.51's callback queue threads sleep 100 ms once their 1 s wait
  // passes (common/grpc/callback_queue_keeper.h). One callback round trip after gaps that sweep
  // that window, without the keeper and then with it (it cannot be stopped: last).
  if (servers.count("inline") > 0 && !payloads.empty()) {
    const Payload& p = payloads.back();
    Server& s = servers.at("inline");
    for (const bool keeper : {false, true}) {
      if (keeper) common::rpc::KeepCallbackQueueAwake();
      std::vector<double> us;
      for (int rep = 0; rep < (o.quick ? 1 : 2); ++rep) {
        for (int gap_ms = 1000; gap_ms <= 1100; gap_ms += 20) {
          absl::SleepFor(absl::Milliseconds(gap_ms));
          const absl::Time t0 = absl::Now();
          RETURN_IF_ERROR(LayerCallback(s, p));
          us.push_back(absl::ToDoubleMicroseconds(absl::Now() - t0));
        }
      }
      const double worst = *std::max_element(us.begin(), us.end());
      const std::string name = keeper ? "keeper" : "no_keeper";
      report.Add({absl::StrCat("rpc_after_idle_round_trip_us_max_", name),
                  worst,
                  "us",
                  {{"variant", "callback/inline"},
                   {"payload", p.name},
                   {"gaps_ms", "1000..1100 step 20"},
                   {"calls", us.size()},
                   {"p50_us", Percentile(us, 0.5)}},
                  std::nullopt});
      std::fprintf(stderr, "after a quiet second, %-9s p50 %8.1f  max %8.1f us (%zu calls)\n",
                   name.c_str(), Percentile(us, 0.5), worst, us.size());
    }
  }
  for (auto& [name, s] : servers) {
    s.executor.reset();
    for (Worker& w : s.workers) w.runner->Shutdown(absl::Now());
  }
  cq.Shutdown();
  void* tag;
  bool ok;
  while (cq.Next(&tag, &ok)) {
  }
  return report;
}

}  // namespace

MOE_REGISTER_BENCH_SUITE("rpc",
                         "RunExperts round trip vs worker compute, per gRPC variant and over "
                         "shared memory",
                         RunRpcBench);

}  // namespace moe::bench
