#include "services/router/remote_expert_executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status_macros.h"
#include "common/grpc/status.h"
#include "grpcpp/client_context.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "services/router/core/dispatch_planner.h"

namespace moe::router {
namespace pb = ::moe::expert_worker::v1;

namespace {
constexpr absl::Duration kUtilisationWindow = absl::Seconds(1);
}  // namespace

struct RemoteExpertExecutor::Metrics {
  explicit Metrics(common::metrics::Registry& r)
      : call_seconds(r.HistogramFamily("moe_expert_call_seconds",
                                       "RunExperts round trip per worker, seconds.")),
        utilisation(r.GaugeFamily("moe_expert_replica_utilisation",
                                  "Busy fraction of each expert worker over the last second.")),
        call_errors(
            r.CounterFamily("moe_expert_call_errors_total", "Failed RunExperts calls per worker.")),
        placement_version(r.AddGauge("moe_placement_version", "Active expert placement version.")),
        recalibrations(
            r.AddCounter("moe_recalibrations_total", "Placement switches (SetPlacement) applied.")),
        layer_dispatch_seconds(
            r.AddHistogram("moe_expert_layer_dispatch_seconds",
                           "One layer's expert dispatch until all outputs are back, seconds.",
                           common::metrics::ExponentialBuckets(1e-5, 2, 22))) {}
  common::metrics::Family<common::metrics::Histogram>& call_seconds;
  common::metrics::Family<common::metrics::Gauge>& utilisation;
  common::metrics::Family<common::metrics::Counter>& call_errors;
  common::metrics::Gauge& placement_version;
  common::metrics::Counter& recalibrations;
  common::metrics::Histogram& layer_dispatch_seconds;
};

struct RemoteExpertExecutor::Worker {
  int32_t id = 0;
  std::string address;
  std::shared_ptr<::grpc::Channel> channel;
  std::unique_ptr<pb::ExpertWorker::Stub> stub;
  common::metrics::Histogram* call_seconds = nullptr;
  common::metrics::Gauge* utilisation_gauge = nullptr;
  common::metrics::Counter* errors = nullptr;
  // Protected by the executor's mu_.
  bool healthy = true;
  int64_t inflight_tokens = 0;
  std::deque<std::pair<absl::Time, absl::Duration>> busy;  // (when, compute) last second
  double Utilisation(absl::Time now) {
    while (!busy.empty() && busy.front().first < now - kUtilisationWindow) busy.pop_front();
    absl::Duration sum;
    for (const auto& b : busy) sum += b.second;
    return absl::FDivDuration(sum, kUtilisationWindow);
  }
};

struct RemoteExpertExecutor::Rpc {
  std::shared_ptr<Worker> worker;
  std::vector<size_t> batch_idx;
  int64_t tokens = 0;
  ::grpc::ClientContext ctx;
  pb::RunExpertsRequest request;
  pb::RunExpertsResponse response;
  ::grpc::Status status;
  absl::Time start;
};

struct RemoteExpertExecutor::Pending {
  engine::ExpertCall call;
  std::shared_ptr<const PlacementTable> table;
  absl::Time start;
  std::vector<std::unique_ptr<Rpc>> rpcs;  // the current round's
  absl::flat_hash_set<int32_t> excluded;   // workers that failed this call
  std::vector<size_t> unavailable;         // batch indices without a live replica
  absl::Mutex mu;
  int remaining ABSL_GUARDED_BY(mu) = 0;
};

RemoteExpertExecutor::RemoteExpertExecutor(const RemoteExpertsOptions& options,
                                           const model::ModelConfig& config,
                                           common::metrics::Registry& registry,
                                           common::Clock& clock)
    : options_(options),
      config_(config),
      clock_(clock),
      metrics_(std::make_unique<Metrics>(registry)) {
  load_tracker_ =
      std::make_unique<LoadTracker>(static_cast<int32_t>(config.num_hidden_layers),
                                    static_cast<int32_t>(config.num_experts), clock, registry);
}

absl::StatusOr<std::unique_ptr<RemoteExpertExecutor>> RemoteExpertExecutor::Create(
    const RemoteExpertsOptions& options, const model::ModelConfig& config,
    common::metrics::Registry& registry, common::Clock& clock) {
  RETURN_IF_ERROR(options.Validate());
  ASSIGN_OR_RETURN(PlacementTable table,
                   BuildPlacement(options.workers, options.placement, options.replicas, config));
  std::unique_ptr<RemoteExpertExecutor> ex(
      new RemoteExpertExecutor(options, config, registry, clock));
  {
    absl::MutexLock lock(&ex->mu_);
    RETURN_IF_ERROR(ex->ConnectLocked(table));
    ex->table_ = std::make_shared<const PlacementTable>(std::move(table));
  }
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
    const common::metrics::Labels labels = {{"worker", absl::StrCat(pw.worker_id)}};
    w->call_seconds = &metrics_->call_seconds.Add(labels, common::metrics::LatencyBuckets());
    w->utilisation_gauge = &metrics_->utilisation.Add(labels);
    w->errors = &metrics_->call_errors.Add(labels);
    workers_[pw.worker_id] = std::move(w);
  }
  return absl::OkStatus();
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

absl::StatusOr<engine::ExpertCallHandle> RemoteExpertExecutor::Submit(
    const engine::ExpertCall& call) {
  if (call.layer_idx < 0 || call.layer_idx >= config_.num_hidden_layers ||
      call.hidden != config_.hidden_size) {
    return absl::InvalidArgumentError(absl::StrCat("expert call: layer ", call.layer_idx,
                                                   " / hidden ", call.hidden,
                                                   " does not fit the model"));
  }
  auto p = std::make_unique<Pending>();
  p->call = call;
  p->start = clock_.Now();
  {
    absl::MutexLock lock(&mu_);
    p->table = table_;
    ++outstanding_[p->table->version];
  }
  std::vector<int64_t> tokens(static_cast<size_t>(config_.num_hidden_layers * config_.num_experts),
                              0);
  std::vector<size_t> all;
  for (size_t i = 0; i < call.batches.size(); ++i) {
    const engine::ExpertBatch& b = call.batches[i];
    if (b.expert_id < 0 || b.expert_id >= config_.num_experts) {
      absl::MutexLock lock(&mu_);
      --outstanding_[p->table->version];
      return absl::InvalidArgumentError(absl::StrCat("expert call: expert ", b.expert_id));
    }
    tokens[static_cast<size_t>(call.layer_idx * config_.num_experts + b.expert_id)] += b.num_tokens;
    if (b.num_tokens > 0) all.push_back(i);
  }
  load_tracker_->RecordExpertTokens(tokens);
  Dispatch(p.get(), all);
  const engine::ExpertCallHandle handle = next_handle_++;
  pending_[handle] = std::move(p);
  return handle;
}

void RemoteExpertExecutor::Dispatch(Pending* p, const std::vector<size_t>& batch_idx) {
  std::vector<DispatchBatch> batches;
  for (size_t i : batch_idx) {
    batches.push_back({p->call.batches[i].expert_id, p->call.batches[i].num_tokens});
  }
  const absl::Time now = clock_.Now();
  DispatchPlan plan;
  std::vector<std::shared_ptr<Worker>> targets;
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
      for (size_t j : idx) targets.back()->inflight_tokens += batches[j].num_tokens;
    }
  }
  for (size_t j : plan.unavailable) p->unavailable.push_back(batch_idx[j]);
  p->rpcs.clear();
  const int64_t hidden = p->call.hidden;
  size_t t = 0;
  for (const auto& [id, idx] : plan.by_worker) {
    auto rpc = std::make_unique<Rpc>();
    rpc->worker = targets[t++];
    rpc->request.set_layer_idx(p->call.layer_idx);
    rpc->request.set_placement_version(p->table->version);
    rpc->request.set_activations(p->call.activations == kernels::Activations::kBf16
                                     ? pb::ACTIVATIONS_BF16
                                     : pb::ACTIVATIONS_F32);
    for (size_t j : idx) {
      const size_t i = batch_idx[j];
      const engine::ExpertBatch& b = p->call.batches[i];
      rpc->batch_idx.push_back(i);
      rpc->tokens += b.num_tokens;
      pb::ExpertBatch* out = rpc->request.add_batches();
      out->set_expert_id(b.expert_id);
      auto* a = out->mutable_activations();
      a->set_dtype(moe::common::v1::DTYPE_F32);
      a->add_shape(b.num_tokens);
      a->add_shape(hidden);
      a->set_data(b.input, static_cast<size_t>(b.num_tokens * hidden) * sizeof(float));
    }
    rpc->ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    p->rpcs.push_back(std::move(rpc));
  }
  {
    absl::MutexLock lock(&p->mu);
    p->remaining = static_cast<int>(p->rpcs.size());
  }
  for (auto& rpc : p->rpcs) {
    Rpc* r = rpc.get();
    r->start = clock_.Now();
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
  if (it != workers_.end() && it->second->healthy) {
    it->second->healthy = false;
    MOE_LOG_WARN("router: expert worker {} ({}) marked unhealthy", worker_id, it->second->address);
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
  for (int attempt = 1;; ++attempt) {
    {
      absl::MutexLock lock(&p->mu);
      p->mu.Await(absl::Condition(
          +[](int* remaining) { return *remaining == 0; }, &p->remaining));
    }
    std::vector<size_t> retry;
    const absl::Time now = clock_.Now();
    for (auto& rpc : p->rpcs) {
      Worker& w = *rpc->worker;
      absl::Status s = common::rpc::FromGrpcStatus(rpc->status);
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
      w.call_seconds->Observe(absl::ToDoubleSeconds(now - rpc->start));
      if (s.ok()) {
        load_tracker_->RecordWorkerTokens(p->call.layer_idx, w.id, rpc->tokens);
        absl::MutexLock lock(&mu_);
        w.busy.emplace_back(now, absl::Microseconds(rpc->response.compute_us()));
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
  metrics_->layer_dispatch_seconds.Observe(absl::ToDoubleSeconds(clock_.Now() - p->start));
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
    std::vector<std::shared_ptr<Worker>> down;
    std::vector<int32_t> ids;
    const absl::Time now = clock_.Now();
    for (auto& [id, w] : workers_) {
      if (!w->healthy) down.push_back(w);
      w->utilisation_gauge->Set(w->Utilisation(now));
    }
    for (const PlacementWorker& w : table_->workers) ids.push_back(w.worker_id);
    mu_.Unlock();
    load_tracker_->UpdateBalancednessGauges(absl::Seconds(60), ids);
    for (auto& w : down) {
      auto serving = common::rpc::CheckServing(*w->channel, "",
                                               std::min(options_.probe_interval, absl::Seconds(1)));
      if (serving.ok() && *serving) {
        absl::MutexLock relock(&mu_);
        w->healthy = true;
        MOE_LOG_INFO("router: expert worker {} ({}) is back", w->id, w->address);
      }
    }
    mu_.Lock();
  }
}

}  // namespace moe::router
