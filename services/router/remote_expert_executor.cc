#include "services/router/remote_expert_executor.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status_macros.h"
#include "common/grpc/status.h"
#include "common/shm/handshake.h"
#include "common/shm/region.h"
#include "grpcpp/client_context.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "services/router/core/dispatch_planner.h"

namespace moe::router {
namespace pb = ::moe::expert_worker::v1;

namespace {
constexpr absl::Duration kUtilisationWindow = absl::Seconds(1);
constexpr absl::Duration kNegotiateTimeout = absl::Seconds(2);

// Length of the union of [begin, end) spans (sorts `spans`).
int64_t SpanUnionNs(std::vector<std::pair<int64_t, int64_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  int64_t total = 0;
  int64_t reach = INT64_MIN;
  for (const auto& [b, e] : spans) {
    const int64_t from = std::max(b, reach);
    if (e > from) total += e - from;
    reach = std::max(reach, e);
  }
  return total;
}
}  // namespace

absl::Duration ExpertCallTimeout(const RemoteExpertsOptions& options,
                                 const model::ModelConfig& config, int64_t rows) {
  // gate + up + down: 3 matmuls of hidden x moe_intermediate, 2 FLOPs per multiply-add.
  const double flops_per_row = 6.0 * static_cast<double>(config.hidden_size) *
                               static_cast<double>(config.moe_intermediate_size);
  const double seconds = static_cast<double>(std::max<int64_t>(rows, 0)) * flops_per_row /
                         (options.min_expert_gflops * 1e9);
  return std::min(options.call_timeout + absl::Seconds(seconds),
                  std::max(options.call_timeout, options.call_timeout_max));
}

struct RemoteExpertExecutor::Metrics {
  explicit Metrics(common::metrics::Registry& r)
      : call_seconds(r.HistogramFamily("moe_expert_call_seconds",
                                       "RunExperts round trip per worker, seconds.")),
        utilisation(r.GaugeFamily("moe_expert_replica_utilisation",
                                  "Busy fraction of each expert worker over the last second.")),
        call_errors(
            r.CounterFamily("moe_expert_call_errors_total", "Failed RunExperts calls per worker.")),
        calls(r.CounterFamily("moe_expert_calls_total",
                              "RunExperts calls sent per worker and transport (grpc, shm).")),
        shm_fallbacks(r.CounterFamily(
            "moe_expert_shm_fallbacks_total",
            "Calls to a shared-memory worker sent over gRPC because the rings had no room.")),
        transport_shm(r.GaugeFamily("moe_expert_transport_shm",
                                    "1 while a worker's calls go through shared memory.")),
        placement_version(r.AddGauge("moe_placement_version", "Active expert placement version.")),
        recalibrations(
            r.AddCounter("moe_recalibrations_total", "Placement switches (SetPlacement) applied.")),
        layer_dispatch_seconds(
            r.AddHistogram("moe_expert_layer_dispatch_seconds",
                           "One layer's expert dispatch until all outputs are back, seconds.",
                           common::metrics::ExponentialBuckets(1e-5, 2, 22))),
        layer_overhead_seconds(r.AddHistogram(
            "moe_expert_layer_overhead_seconds",
            "One layer's expert dispatch minus its longest worker compute (transport, "
            "wake-ups), seconds.",
            common::metrics::ExponentialBuckets(2e-6, 1.5, 32))) {}
  common::metrics::Family<common::metrics::Histogram>& call_seconds;
  common::metrics::Family<common::metrics::Gauge>& utilisation;
  common::metrics::Family<common::metrics::Counter>& call_errors;
  common::metrics::Family<common::metrics::Counter>& calls;
  common::metrics::Family<common::metrics::Counter>& shm_fallbacks;
  common::metrics::Family<common::metrics::Gauge>& transport_shm;
  common::metrics::Gauge& placement_version;
  common::metrics::Counter& recalibrations;
  common::metrics::Histogram& layer_dispatch_seconds;
  common::metrics::Histogram& layer_overhead_seconds;
};

struct RemoteExpertExecutor::Worker {
  int32_t id = 0;
  std::string address;
  std::shared_ptr<::grpc::Channel> channel;
  std::unique_ptr<pb::ExpertWorker::Stub> stub;
  common::metrics::Histogram* call_seconds = nullptr;
  common::metrics::Gauge* utilisation_gauge = nullptr;
  common::metrics::Counter* errors = nullptr;
  common::metrics::Counter* grpc_calls = nullptr;
  common::metrics::Counter* shm_calls = nullptr;
  common::metrics::Counter* shm_fallbacks = nullptr;
  common::metrics::Gauge* transport_gauge = nullptr;
  // Protected by the executor's mu_.
  bool healthy = true;
  std::shared_ptr<ShmExpertChannel> shm;  // null: gRPC
  bool negotiate = false;                 // (re)negotiate at the next probe
  int negotiate_failures = 0;             // in a row (logged at the first, then every 100th)
  int64_t inflight_tokens = 0;
  // (when, compute) of the last second's calls, and their sum: O(1) per call to read.
  std::deque<std::pair<absl::Time, absl::Duration>> busy;
  absl::Duration busy_sum;
  double Utilisation(absl::Time now) {
    while (!busy.empty() && busy.front().first < now - kUtilisationWindow) {
      busy_sum -= busy.front().second;
      busy.pop_front();
    }
    return absl::FDivDuration(busy_sum, kUtilisationWindow);
  }
  void AddBusy(absl::Time now, absl::Duration compute) {
    busy.emplace_back(now, compute);
    busy_sum += compute;
  }
};

struct RemoteExpertExecutor::Rpc {
  std::shared_ptr<Worker> worker;
  std::vector<size_t> batch_idx;
  int64_t tokens = 0;
  absl::Time start;
  absl::Time deadline;
  absl::Duration compute;
  // Shared memory: the channel the call went through (else gRPC) and its result.
  std::shared_ptr<ShmExpertChannel> shm;
  uint64_t shm_call = 0;
  absl::Status shm_status;
  ShmCallTimes shm_times;
  // gRPC.
  ::grpc::ClientContext ctx;
  pb::RunExpertsRequest request;
  pb::RunExpertsResponse response;
  ::grpc::Status status;
};

struct RemoteExpertExecutor::Pending {
  engine::ExpertCall call;
  std::shared_ptr<const PlacementTable> table;
  absl::Time start;
  std::vector<std::unique_ptr<Rpc>> rpcs;  // the current round's
  absl::flat_hash_set<int32_t> excluded;   // workers that failed this call
  std::vector<size_t> unavailable;         // batch indices without a live replica
  absl::Mutex mu;
  int remaining ABSL_GUARDED_BY(mu) = 0;  // gRPC calls of the round not yet completed
};

RemoteExpertExecutor::RemoteExpertExecutor(const RemoteExpertsOptions& options,
                                           const model::ModelConfig& config,
                                           common::metrics::Registry& registry,
                                           common::Clock& clock)
    : options_(options),
      config_(config),
      clock_(clock),
      metrics_(std::make_unique<Metrics>(registry)),
      boot_id_(options.transport == ExpertTransport::kGrpc ? "" : shm::HostBootId()) {
  load_tracker_ =
      std::make_unique<LoadTracker>(static_cast<int32_t>(config.num_hidden_layers),
                                    static_cast<int32_t>(config.num_experts), clock, registry);
  if (options.transport != ExpertTransport::kGrpc) {
    heartbeat_ =
        std::make_unique<shm::Heartbeat>(absl::ToInt64Nanoseconds(options.shm.heartbeat_interval));
  }
}

absl::StatusOr<std::unique_ptr<RemoteExpertExecutor>> RemoteExpertExecutor::Create(
    const RemoteExpertsOptions& options, const model::ModelConfig& config,
    common::metrics::Registry& registry, common::Clock& clock) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(PlacementTable table,
                   BuildPlacement(options.workers, options.placement, options.replicas, config));
  std::unique_ptr<RemoteExpertExecutor> ex(
      new RemoteExpertExecutor(options, config, registry, clock));
  std::vector<std::shared_ptr<Worker>> workers;
  {
    absl::MutexLock lock(&ex->mu_);
    RETURN_IF_ERROR(ex->ConnectLocked(table));
    ex->table_ = std::make_shared<const PlacementTable>(std::move(table));
    for (auto& [id, w] : ex->workers_) workers.push_back(w);
  }
  ex->NegotiateAll(workers);
  ex->metrics_->placement_version.Set(0);
  ex->prober_ = std::thread([p = ex.get()] { p->ProbeLoop(); });
  return ex;
}

RemoteExpertExecutor::~RemoteExpertExecutor() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (prober_.joinable()) prober_.join();
  absl::MutexLock lock(&mu_);
  workers_.clear();  // closes the regions before the heartbeat stops
}

absl::Status RemoteExpertExecutor::ConnectLocked(const PlacementTable& table) {
  for (const PlacementWorker& pw : table.workers) {
    auto it = workers_.find(pw.worker_id);
    if (it != workers_.end() && it->second->address == pw.address) continue;
    auto w = std::make_shared<Worker>();
    w->id = pw.worker_id;
    w->address = pw.address;
    ASSIGN_OR_RETURN(w->channel, common::rpc::CreateChannel(pw.address, options_.channel));
    w->stub = pb::ExpertWorker::NewStub(w->channel);
    const std::string id = absl::StrCat(pw.worker_id);
    const common::metrics::Labels labels = {{"worker", id}};
    w->call_seconds = &metrics_->call_seconds.Add(labels, common::metrics::LatencyBuckets());
    w->utilisation_gauge = &metrics_->utilisation.Add(labels);
    w->errors = &metrics_->call_errors.Add(labels);
    w->grpc_calls = &metrics_->calls.Add({{"worker", id}, {"transport", "grpc"}});
    w->shm_calls = &metrics_->calls.Add({{"worker", id}, {"transport", "shm"}});
    w->shm_fallbacks = &metrics_->shm_fallbacks.Add(labels);
    w->transport_gauge = &metrics_->transport_shm.Add(labels);
    // A worker added by SetPlacement negotiates at the next probe.
    w->negotiate = options_.transport != ExpertTransport::kGrpc;
    workers_[pw.worker_id] = std::move(w);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<ShmExpertChannel>> RemoteExpertExecutor::Negotiate(Worker& w) {
  pb::NegotiateTransportRequest req;
  req.add_accept(pb::TRANSPORT_KIND_SHARED_MEMORY);
  req.set_boot_id(boot_id_);
  req.set_pid(static_cast<uint32_t>(getpid()));
  pb::NegotiateTransportResponse resp;
  ::grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kNegotiateTimeout));
  const ::grpc::Status s = w.stub->NegotiateTransport(&ctx, req, &resp);
  if (s.error_code() == ::grpc::StatusCode::UNIMPLEMENTED) return nullptr;  // an older worker
  if (!s.ok()) return common::rpc::FromGrpcStatus(s);
  if (!resp.has_shared_memory()) {
    MOE_LOG_INFO("router: expert worker {} ({}) over gRPC: {}", w.id, w.address,
                 resp.grpc().reason());
    return nullptr;
  }
  const pb::SharedMemoryTransport& t = resp.shared_memory();
  absl::StatusOr<std::unique_ptr<ShmExpertChannel>> connected =
      ShmExpertChannel::Connect(t.socket_path(), t.ticket(), options_.shm, *heartbeat_, clock_);
  if (!connected.ok()) {
    // The worker is up but its socket is not ours to reach (another pod on this node, another
    // mount namespace) or refused us: gRPC for this worker, until it restarts.
    if (options_.transport == ExpertTransport::kShm) return connected.status();
    MOE_LOG_INFO("router: expert worker {} ({}) over gRPC: shared memory offered but {}", w.id,
                 w.address, connected.status().ToString());
    return nullptr;
  }
  std::unique_ptr<ShmExpertChannel> channel = std::move(*connected);
  MOE_LOG_INFO("router: expert worker {} ({}) over shared memory ({} KiB rings, pid {})", w.id,
               w.address, t.ring_bytes() >> 10, t.worker_pid());
  return std::shared_ptr<ShmExpertChannel>(std::move(channel));
}

void RemoteExpertExecutor::NegotiateAll(const std::vector<std::shared_ptr<Worker>>& workers) {
  if (options_.transport == ExpertTransport::kGrpc) return;
  for (const auto& w : workers) {
    absl::StatusOr<std::shared_ptr<ShmExpertChannel>> channel = Negotiate(*w);
    absl::MutexLock lock(&mu_);
    if (channel.ok()) {
      w->shm = *std::move(channel);
      w->negotiate = false;
      w->negotiate_failures = 0;
      if (w->shm == nullptr && options_.transport == ExpertTransport::kShm) {
        w->healthy = false;
        w->negotiate = true;
        MOE_LOG_WARN("router: expert worker {} offers no shared memory (experts.transport: shm)",
                     w->id);
      }
    } else {
      // Could not tell (down, or the handshake failed): gRPC meanwhile, and ask again later.
      w->shm = nullptr;
      w->negotiate = true;
      if (options_.transport == ExpertTransport::kShm) w->healthy = false;
      if (w->negotiate_failures++ % 100 == 0) {
        MOE_LOG_WARN("router: transport negotiation with expert worker {} ({}): {}", w->id,
                     w->address, channel.status().ToString());
      }
    }
    w->transport_gauge->Set(w->shm != nullptr ? 1 : 0);
  }
}

std::shared_ptr<const PlacementTable> RemoteExpertExecutor::placement() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

bool RemoteExpertExecutor::healthy(int32_t worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second->healthy;
}

std::string RemoteExpertExecutor::transport(int32_t worker_id) const {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  return it != workers_.end() && it->second->shm != nullptr && !it->second->shm->broken() ? "shm"
                                                                                          : "grpc";
}

absl::StatusOr<engine::ExpertCallHandle> RemoteExpertExecutor::Submit(
    const engine::ExpertCall& call) {
  if (call.layer_idx < 0 || call.layer_idx >= config_.num_hidden_layers ||
      call.hidden != config_.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("expert call: layer ", call.layer_idx,
                                                   " / hidden ", call.hidden,
                                                   " does not fit the model"));
  }
  // Work of the order of the call's batches (never of layers x experts).
  layer_tokens_.clear();
  std::vector<size_t> all;
  all.reserve(call.batches.size());
  for (size_t i = 0; i < call.batches.size(); ++i) {
    const engine::ExpertBatch& b = call.batches[i];
    if (b.expert_id < 0 || b.expert_id >= config_.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat("expert call: expert ", b.expert_id));
    }
    layer_tokens_.push_back({b.expert_id, b.num_tokens});
    if (b.num_tokens > 0) all.push_back(i);
  }
  auto p = std::make_unique<Pending>();
  p->call = call;
  p->start = clock_.Now();
  {
    absl::MutexLock lock(&mu_);
    p->table = table_;
    ++outstanding_[p->table->version];
  }
  load_tracker_->RecordLayerTokens(call.layer_idx, layer_tokens_);
  Dispatch(p.get(), all);
  const engine::ExpertCallHandle handle = next_handle_++;
  pending_[handle] = std::move(p);
  return handle;
}

void RemoteExpertExecutor::Dispatch(Pending* p, const std::vector<size_t>& batch_idx) {
  std::vector<DispatchBatch> batches;
  batches.reserve(batch_idx.size());
  for (size_t i : batch_idx) {
    batches.push_back({p->call.batches[i].expert_id, p->call.batches[i].num_tokens});
  }
  const absl::Time now = clock_.Now();
  DispatchPlan plan;
  std::vector<std::shared_ptr<Worker>> targets;
  std::vector<std::shared_ptr<ShmExpertChannel>> channels;
  {
    absl::MutexLock lock(&mu_);
    auto state = [&](int32_t id) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      auto it = workers_.find(id);
      if (it == workers_.end()) return ReplicaState{false, 0, 0};
      return ReplicaState{it->second->healthy, it->second->Utilisation(now),
                          it->second->inflight_tokens};
    };
    plan = PlanDispatch(*p->table, p->call.layer_idx, batches, state,
                        options_.utilisation_threshold, p->excluded, rotation_++);
    for (const auto& [id, idx] : plan.by_worker) {
      targets.push_back(workers_.at(id));
      channels.push_back(targets.back()->shm);
      for (size_t j : idx) targets.back()->inflight_tokens += batches[j].num_tokens;
    }
  }
  for (size_t j : plan.unavailable) p->unavailable.push_back(batch_idx[j]);
  p->rpcs.clear();
  const int64_t hidden = p->call.hidden;
  const uint64_t version = p->table->version;
  size_t t = 0;
  int grpc_calls = 0;
  for (const auto& [id, idx] : plan.by_worker) {
    auto rpc = std::make_unique<Rpc>();
    rpc->worker = targets[t];
    std::shared_ptr<ShmExpertChannel> shm = std::move(channels[t]);
    ++t;
    for (size_t j : idx) {
      rpc->batch_idx.push_back(batch_idx[j]);
      rpc->tokens += p->call.batches[batch_idx[j]].num_tokens;
    }
    rpc->start = clock_.Now();
    rpc->deadline = rpc->start + ExpertCallTimeout(options_, config_, rpc->tokens);
    if (shm != nullptr) {
      const uint64_t call_id = next_shm_call_++;
      const bool sent = shm->TrySubmit(call_id, p->call, rpc->batch_idx, version, rpc->deadline);
      if (sent || shm->broken()) {
        // A broken region (the worker closed it, died or misbehaved) fails the call like a
        // dead connection: the worker is marked down, the batches go to other replicas.
        rpc->shm_call = sent ? call_id : 0;
        if (!sent) rpc->shm_status = absl::UnavailableError("shared memory region gone");
        rpc->shm = std::move(shm);
        rpc->worker->shm_calls->Increment();
        p->rpcs.push_back(std::move(rpc));
        continue;
      }
      rpc->worker->shm_fallbacks->Increment();  // no room in the rings now: this call by gRPC
    }
    rpc->request.set_layer_idx(p->call.layer_idx);
    rpc->request.set_placement_version(version);
    rpc->request.set_activations(p->call.activations == kernels::Activations::kBf16
                                     ? pb::ACTIVATIONS_BF16
                                     : pb::ACTIVATIONS_F32);
    rpc->request.set_weights(p->call.weights == model::WeightsMode::kQ8_0 ? pb::WEIGHTS_Q8_0
                                                                          : pb::WEIGHTS_CHECKPOINT);
    for (size_t i : rpc->batch_idx) {
      const engine::ExpertBatch& b = p->call.batches[i];
      pb::ExpertBatch* out = rpc->request.add_batches();
      out->set_expert_id(b.expert_id);
      auto* a = out->mutable_activations();
      a->set_dtype(moe::common::v1::DTYPE_F32);
      a->add_shape(b.num_tokens);
      a->add_shape(hidden);
      a->set_data(b.input, static_cast<size_t>(b.num_tokens * hidden) * sizeof(float));
    }
    // gRPC deadlines are on the real clock.
    rpc->ctx.set_deadline(
        absl::ToChronoTime(absl::Now() + ExpertCallTimeout(options_, config_, rpc->tokens)));
    rpc->worker->grpc_calls->Increment();
    ++grpc_calls;
    p->rpcs.push_back(std::move(rpc));
  }
  {
    absl::MutexLock lock(&p->mu);
    p->remaining = grpc_calls;
  }
  for (auto& rpc : p->rpcs) {
    if (rpc->shm != nullptr) continue;
    Rpc* r = rpc.get();
    r->worker->stub->async()->RunExperts(&r->ctx, &r->request, &r->response,
                                         [this, p, r](::grpc::Status s) {
                                           r->status = std::move(s);
                                           {
                                             absl::MutexLock lock(&mu_);
                                             r->worker->inflight_tokens -= r->tokens;
                                           }
                                           absl::MutexLock lock(&p->mu);
                                           --p->remaining;
                                         });
  }
}

void RemoteExpertExecutor::MarkUnhealthy(int32_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  Worker& w = *it->second;
  if (w.shm != nullptr && w.shm->broken()) {
    // Its region is gone (the worker died or left): renegotiate once it is back.
    w.shm = nullptr;
    w.negotiate = true;
    w.transport_gauge->Set(0);
  }
  if (w.healthy) {
    w.healthy = false;
    MOE_LOG_WARN("router: expert worker {} ({}) marked unhealthy", worker_id, w.address);
  }
}

absl::Status RemoteExpertExecutor::Await(engine::ExpertCallHandle handle) {
  std::vector<int32_t> unavailable;
  RETURN_IF_ERROR(AwaitPartial(handle, &unavailable));
  if (!unavailable.empty()) {
    return absl::UnavailableError(absl::StrCat("no live replica of expert ", unavailable.front(),
                                               " (and ", unavailable.size() - 1, " more)"));
  }
  return absl::OkStatus();
}

absl::Status RemoteExpertExecutor::AwaitPartial(engine::ExpertCallHandle handle,
                                                std::vector<int32_t>* unavailable_experts) {
  auto it = pending_.find(handle);
  if (it == pending_.end()) {
    return absl::NotFoundError(absl::StrCat("expert call ", handle, " unknown or awaited"));
  }
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  absl::Status fatal;
  const int64_t hidden = p->call.hidden;
  ExpertCallTiming timing;
  std::vector<std::pair<int64_t, int64_t>> compute_spans;  // one per worker call at most
  compute_spans.reserve(p->rpcs.size());
  for (int attempt = 1;; ++attempt) {
    // Shared-memory calls are driven by this thread: their answers are read here (each call's
    // outputs written in place); the gRPC ones complete on gRPC's threads meanwhile.
    for (auto& rpc : p->rpcs) {
      if (rpc->shm == nullptr) continue;
      if (rpc->shm_call != 0) {
        rpc->shm_status =
            rpc->shm->Await(rpc->shm_call, rpc->deadline, &rpc->compute, &rpc->shm_times);
      }
      absl::MutexLock lock(&mu_);
      rpc->worker->inflight_tokens -= rpc->tokens;
    }
    {
      absl::MutexLock lock(&p->mu);
      p->mu.Await(absl::Condition(
          +[](int* remaining) { return *remaining == 0; }, &p->remaining));
    }
    std::vector<size_t> retry;
    const absl::Time now = clock_.Now();
    timing = {};
    compute_spans.clear();
    for (auto& rpc : p->rpcs) {
      Worker& w = *rpc->worker;
      absl::Status s;
      if (rpc->shm != nullptr) {
        s = std::move(rpc->shm_status);
        ++timing.shm_calls;
      } else {
        ++timing.grpc_calls;
        s = common::rpc::FromGrpcStatus(rpc->status);
        if (s.ok() && rpc->response.outputs_size() != static_cast<int>(rpc->batch_idx.size())) {
          s = absl::InternalError("RunExperts: wrong number of outputs");
        }
        for (size_t j = 0; s.ok() && j < rpc->batch_idx.size(); ++j) {
          const engine::ExpertBatch& b = p->call.batches[rpc->batch_idx[j]];
          const std::string& data = rpc->response.outputs(static_cast<int>(j)).outputs().data();
          if (data.size() != static_cast<size_t>(b.num_tokens * hidden) * sizeof(float)) {
            s = absl::InternalError("RunExperts: output of the wrong size");
            break;
          }
          std::memcpy(b.output, data.data(), data.size());
        }
        rpc->compute = absl::Microseconds(rpc->response.compute_us());
      }
      w.call_seconds->Observe(absl::ToDoubleSeconds(now - rpc->start));
      if (s.ok()) {
        timing.max_compute = std::max(timing.max_compute, rpc->compute);
        if (rpc->shm != nullptr) {
          const ShmCallTimes& t = rpc->shm_times;
          timing.shm_to_worker_max = std::max(timing.shm_to_worker_max,
                                              absl::Nanoseconds(t.picked_mono_ns - t.sent_mono_ns));
          timing.shm_to_router_max = std::max(
              timing.shm_to_router_max, absl::Nanoseconds(t.seen_mono_ns - t.published_mono_ns));
          if (t.compute_start_mono_ns != 0) {
            compute_spans.emplace_back(
                t.compute_start_mono_ns,
                t.compute_start_mono_ns + absl::ToInt64Nanoseconds(rpc->compute));
          }
        }
        load_tracker_->RecordWorkerTokens(p->call.layer_idx, w.id, rpc->tokens);
        absl::MutexLock lock(&mu_);
        w.AddBusy(now, rpc->compute);
        continue;
      }
      w.errors->Increment();
      if (s.code() == absl::StatusCode::kInvalidArgument) {
        fatal = s;  // a bug on this side: retrying elsewhere cannot help
        continue;
      }
      // Placement-stale (FAILED_PRECONDITION) and overload (RESOURCE_EXHAUSTED) answers come
      // from a live worker: retry elsewhere without marking it down.
      if (s.code() != absl::StatusCode::kFailedPrecondition &&
          s.code() != absl::StatusCode::kResourceExhausted) {
        MarkUnhealthy(w.id);
      }
      p->excluded.insert(w.id);
      retry.insert(retry.end(), rpc->batch_idx.begin(), rpc->batch_idx.end());
    }
    timing.shm_compute_union = absl::Nanoseconds(SpanUnionNs(compute_spans));
    if (retry.empty() || !fatal.ok()) break;
    if (attempt >= options_.max_attempts) {
      p->unavailable.insert(p->unavailable.end(), retry.begin(), retry.end());
      break;
    }
    Dispatch(p.get(), retry);
  }
  for (size_t i : p->unavailable) {
    const engine::ExpertBatch& b = p->call.batches[i];
    std::memset(b.output, 0, static_cast<size_t>(b.num_tokens * hidden) * sizeof(float));
    unavailable_experts->push_back(b.expert_id);
  }
  timing.dispatch = clock_.Now() - p->start;
  metrics_->layer_dispatch_seconds.Observe(absl::ToDoubleSeconds(timing.dispatch));
  metrics_->layer_overhead_seconds.Observe(
      absl::ToDoubleSeconds(std::max(absl::ZeroDuration(), timing.dispatch - timing.max_compute)));
  if (call_observer_) call_observer_(timing);
  {
    absl::MutexLock lock(&mu_);
    if (--outstanding_[p->table->version] == 0) outstanding_.erase(p->table->version);
  }
  return fatal;
}

absl::StatusOr<uint64_t> RemoteExpertExecutor::SetPlacement(PlacementTable table) {
  RETURN_IF_ERROR(table.Validate(config_));
  uint64_t previous = 0;
  const uint64_t version = table.version;
  {
    absl::MutexLock lock(&mu_);
    previous = table_->version;
    if (version <= previous) {
      return absl::FailedPreconditionError(
          absl::StrCat("placement version ", version, " is not newer than the active ", previous));
    }
    RETURN_IF_ERROR(ConnectLocked(table));
    table_ = std::make_shared<const PlacementTable>(std::move(table));
    metrics_->placement_version.Set(static_cast<double>(version));
    metrics_->recalibrations.Increment();
    auto drained = [this, version]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return outstanding_.empty() || outstanding_.begin()->first >= version;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&drained), options_.drain_timeout)) {
      return absl::DeadlineExceededError(
          absl::StrCat("placement v", version,
                       " active, but calls under older versions did not "
                       "drain within ",
                       absl::FormatDuration(options_.drain_timeout)));
    }
  }
  MOE_LOG_INFO("router: expert placement v{} active (was v{})", version, previous);
  return previous;
}

void RemoteExpertExecutor::ProbeLoop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    mu_.AwaitWithTimeout(absl::Condition(&stop_), options_.probe_interval);
    if (stop_) break;
    std::vector<std::shared_ptr<Worker>> down, renegotiate;
    std::vector<int32_t> ids;
    const absl::Time now = clock_.Now();
    for (auto& [id, w] : workers_) {
      if (!w->healthy) {
        down.push_back(w);
      } else if (w->negotiate) {
        renegotiate.push_back(w);
      }
      w->utilisation_gauge->Set(w->Utilisation(now));
    }
    for (const PlacementWorker& w : table_->workers) ids.push_back(w.worker_id);
    mu_.Unlock();
    load_tracker_->UpdateBalancednessGauges(absl::Seconds(60), ids);
    for (auto& w : down) {
      auto serving = common::rpc::CheckServing(*w->channel, "",
                                               std::min(options_.probe_interval, absl::Seconds(1)));
      if (!serving.ok() || !*serving) continue;
      bool again = false;
      {
        absl::MutexLock relock(&mu_);
        again = w->negotiate || (w->shm != nullptr && w->shm->broken());
      }
      // A worker back from the dead has a new region to offer (or none): ask before using it.
      if (again) {
        NegotiateAll({w});
        absl::MutexLock relock(&mu_);
        if (options_.transport == ExpertTransport::kShm && w->shm == nullptr) continue;
      }
      absl::MutexLock relock(&mu_);
      w->healthy = true;
      MOE_LOG_INFO("router: expert worker {} ({}) is back ({})", w->id, w->address,
                   w->shm != nullptr ? "shared memory" : "gRPC");
    }
    if (!renegotiate.empty()) NegotiateAll(renegotiate);
    mu_.Lock();
  }
}

}  // namespace moe::router
