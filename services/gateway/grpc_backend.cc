#include "services/gateway/grpc_backend.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/log.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/status.h"
#include "grpcpp/grpcpp.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "services/gateway/core/request_id.h"

namespace moe::gateway {
namespace {

namespace pb = ::moe::router::v1;
using generation::FinishReason;
using generation::Usage;

struct RouterConn {
  std::string target;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Router::Stub> stub;
  std::atomic<bool> healthy{false};
  std::atomic<int32_t> num_waiting{0};
  std::atomic<int32_t> num_running{0};
  std::atomic<double> kv_usage{0};
  std::atomic<int64_t> in_flight{0};
};

// Reactors not yet finished with OnDone, across the process: ~Backend waits for them.
std::atomic<int64_t> g_live_reactors{0};

pb::GenerateRequest ToProto(const GenerateRequest& r, const std::string& model) {
  pb::GenerateRequest p;
  p.set_request_id(r.request_id);
  p.mutable_prompt_token_ids()->Assign(r.prompt_token_ids.begin(), r.prompt_token_ids.end());
  const generation::SamplingParams& sampling = r.sampling;
  auto* s = p.mutable_sampling();
  s->set_temperature(sampling.temperature);
  s->set_top_p(sampling.top_p);
  s->set_top_k(sampling.top_k);
  s->set_min_p(sampling.min_p);
  if (sampling.seed) s->set_seed(*sampling.seed);
  s->set_repetition_penalty(sampling.repetition_penalty);
  s->set_frequency_penalty(sampling.frequency_penalty);
  s->set_presence_penalty(sampling.presence_penalty);
  for (const auto& [id, bias] : sampling.logit_bias) (*s->mutable_logit_bias())[id] = bias;
  p.set_max_tokens(r.prefill_only ? 0 : sampling.max_tokens);
  p.set_prefill_only(r.prefill_only);
  p.mutable_stop_token_ids()->Assign(sampling.stop_token_ids.begin(),
                                     sampling.stop_token_ids.end());
  p.set_ignore_eos(sampling.ignore_eos);
  p.set_logprobs(sampling.returns_logprobs());
  p.set_top_logprobs(sampling.num_top_logprobs());
  p.set_cache_salt(r.cache_salt);
  p.set_priority(r.priority);
  switch (r.constraint.kind) {
    case generation::ConstraintKind::kJsonSchema:
      p.mutable_constraint()->set_json_schema(r.constraint.spec);
      break;
    case generation::ConstraintKind::kJsonObject:
      p.mutable_constraint()->set_json_object(true);
      break;
    case generation::ConstraintKind::kRegex:
      p.mutable_constraint()->set_regex(r.constraint.spec);
      break;
    case generation::ConstraintKind::kChoice:
      p.mutable_constraint()->mutable_choice()->mutable_choices()->Assign(
          r.constraint.choices.begin(), r.constraint.choices.end());
      break;
    case generation::ConstraintKind::kNone:
      break;
  }
  (void)model;  // The router checks `model` only when set; ids may differ by launch path.
  return p;
}

FinishReason FromProto(pb::FinishReason f) {
  switch (f) {
    case pb::FINISH_REASON_STOP:
      return FinishReason::kStop;
    case pb::FINISH_REASON_LENGTH:
      return FinishReason::kLength;
    case pb::FINISH_REASON_ABORT:
      return FinishReason::kAbort;
    case pb::FINISH_REASON_ERROR:
      return FinishReason::kError;
    default:
      return FinishReason::kNone;
  }
}

GenerateUpdate FromProto(const pb::GenerateResponse& r) {
  GenerateUpdate u;
  u.token_ids.assign(r.token_ids().begin(), r.token_ids().end());
  for (const pb::TokenLogprobs& lp : r.logprobs()) {
    TokenLogprobs t{lp.logprob(), {}};
    for (const pb::TopLogprob& top : lp.top_logprobs())
      t.top.push_back({top.token_id(), top.logprob()});
    u.logprobs.push_back(std::move(t));
  }
  u.finish = FromProto(r.finish_reason());
  if (r.has_usage()) {
    u.usage = Usage{r.usage().prompt_tokens(), r.usage().completion_tokens(),
                    r.usage().cached_prompt_tokens()};
  }
  u.error_message = r.error_message();
  return u;
}

class Backend;

// One request across its attempts (one per router tried).
class CallState : public std::enable_shared_from_this<CallState> {
 public:
  CallState(Backend* backend, GenerateRequest request, pb::GenerateRequest proto,
            std::shared_ptr<GenerateObserver> observer, std::vector<int> order, int max_attempts)
      : backend_(backend),
        request_(std::move(request)),
        proto_(std::move(proto)),
        observer_(std::move(observer)),
        order_(std::move(order)),
        max_attempts_(max_attempts) {}

  void StartAttempt();
  void Cancel();
  // From the attempt's reactor.
  void OnAttemptDone(const grpc::Status& status, bool got_message, bool finished);
  // Only while an attempt's reactor is live, or from OnAttemptDone: the calls on the observer are
  // sequential (one reactor at a time, OnAttemptDone after it is deleted).
  GenerateObserver& observer() { return *observer_; }
  // The observer, no longer held: the request has ended (no attempt follows).
  std::shared_ptr<GenerateObserver> Release() { return std::move(observer_); }
  void ClearAttempt() {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
  }

 private:
  Backend* const backend_;
  const GenerateRequest request_;
  const pb::GenerateRequest proto_;
  // Dropped once the request has ended (Release): the observer (a CompletionSession) holds this
  // state through its call handle, so holding it past the end would be a reference cycle.
  std::shared_ptr<GenerateObserver> observer_;
  const std::vector<int> order_;
  const int max_attempts_;
  int attempt_ = 0;  // used only by the serial attempt chain

  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class Reactor final : public grpc::ClientReadReactor<pb::GenerateResponse> {
 public:
  Reactor(std::shared_ptr<CallState> state, RouterConn* router)
      : state_(std::move(state)), router_(router) {}

  grpc::ClientContext* context() { return &context_; }

  void Start(const pb::GenerateRequest& request) {
    g_live_reactors.fetch_add(1);
    router_->in_flight.fetch_add(1);
    router_->stub->async()->Generate(&context_, &request, this);
    // The read flow leaves the reactions (back-pressure: the observer's WhenReady may start the
    // next read later, from an HTTP I/O thread): the hold keeps OnDone, and so `delete this`,
    // until the last read has come back not ok (gRPC's documented pattern for that).
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      RemoveHold();  // no more reads: OnDone follows
      return;
    }
    got_message_ = true;
    GenerateUpdate u = FromProto(response_);
    const bool last = u.finish != FinishReason::kNone;
    if (last) finished_ = true;
    state_->observer().OnUpdate(std::move(u));
    if (last) {
      StartRead(&response_);  // the status
      return;
    }
    // Reads one message at a time and only when the observer is ready for it: a client that
    // stops reading stops this stream being read, so HTTP/2 flow control fills and the router's
    // bounded stream holds the sequence. response_, got_message_ and finished_ are touched only
    // here and in OnDone: the read this starts is the only one outstanding, and OnDone comes
    // after it.
    state_->observer().WhenReady([this] { StartRead(&response_); });
  }

  void OnDone(const grpc::Status& status) override {
    router_->in_flight.fetch_sub(1);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !got_message_) {
      router_->healthy.store(false);
    }
    std::shared_ptr<CallState> state = std::move(state_);
    state->ClearAttempt();
    const bool got = got_message_, finished = finished_;
    delete this;
    state->OnAttemptDone(status, got, finished);
    g_live_reactors.fetch_sub(1);
  }

 private:
  std::shared_ptr<CallState> state_;
  RouterConn* const router_;
  grpc::ClientContext context_;
  pb::GenerateResponse response_;
  bool got_message_ = false;
  bool finished_ = false;
};

class Handle final : public GenerateCall {
 public:
  explicit Handle(std::shared_ptr<CallState> state) : state_(std::move(state)) {}
  void Cancel() override { state_->Cancel(); }

 private:
  std::shared_ptr<CallState> state_;
};

class Backend final : public GrpcBackend {
 public:
  Backend(const RoutingOptions& options, const std::string& model_id)
      : options_(options), model_id_(model_id) {
    picker_.affinity_blocks = options.affinity_blocks;
    picker_.queue_scale = options.queue_scale;
    picker_.load_slack = options.load_slack;
    picker_.root.model_id = model_id;
    picker_.root.block_size = options.block_size;
    picker_.root.kv_dtype = options.kv_dtype == "bf16"  ? common::DType::kBF16
                            : options.kv_dtype == "f16" ? common::DType::kF16
                                                        : common::DType::kF32;
    root_ = kv::RootHash(picker_.root);
  }
  ~Backend() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    if (poller_.joinable()) poller_.join();
    // Calls still unwinding on gRPC threads use the stubs: let them finish first.
    for (int i = 0; i < 5000 && g_live_reactors.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  absl::Status Init() {
    for (const std::string& target : options_.routers) {
      auto conn = std::make_unique<RouterConn>();
      conn->target = target;
      auto channel = common::rpc::CreateChannel(target, options_.channel);
      if (!channel.ok()) return channel.status();
      conn->channel = *channel;
      conn->stub = pb::Router::NewStub(conn->channel);
      ids_.push_back(target);
      routers_.push_back(std::move(conn));
    }
    poller_ = std::thread([this] { PollLoop(); });
    return absl::OkStatus();
  }

  std::unique_ptr<GenerateCall> Generate(GenerateRequest request,
                                         std::shared_ptr<GenerateObserver> observer) override {
    kv::BlockHash root;
    RouterPickerOptions picker;
    {
      absl::MutexLock lock(&root_mu_);
      root = root_;
      picker = picker_;
    }
    const kv::BlockHash key = AffinityKey(root, request.prompt_token_ids, picker.root.block_size,
                                          options_.affinity_blocks);
    std::vector<int> order = OrderRouters(key, ids_, Loads(), picker);
    pb::GenerateRequest proto = ToProto(request, model_id_);
    auto state =
        std::make_shared<CallState>(this, std::move(request), std::move(proto), std::move(observer),
                                    std::move(order), options_.max_attempts);
    state->StartAttempt();
    return std::make_unique<Handle>(std::move(state));
  }

  bool Ready() const override {
    for (const auto& r : routers_) {
      if (r->healthy.load()) return true;
    }
    return false;
  }

  std::vector<RouterLoad> Loads() const override {
    std::vector<RouterLoad> loads;
    loads.reserve(routers_.size());
    for (const auto& r : routers_) {
      loads.push_back(RouterLoad{r->healthy.load(), r->num_waiting.load(), r->num_running.load(),
                                 r->kv_usage.load(), r->in_flight.load()});
    }
    return loads;
  }

  void PollNowForTesting() override { PollOnce(); }

  kv::BlockHashRootKey AffinityNamespace() const override {
    absl::MutexLock lock(&root_mu_);
    return picker_.root;
  }

  RouterConn& router(int i) { return *routers_[i]; }

 private:
  void PollOnce() {
    for (auto& r : routers_) {
      grpc::ClientContext ctx;
      ctx.set_deadline(
          std::chrono::system_clock::now() +
          std::chrono::microseconds(absl::ToInt64Microseconds(options_.connect_timeout)));
      pb::GetStatsRequest req;
      pb::GetStatsResponse resp;
      const grpc::Status status = r->stub->GetStats(&ctx, req, &resp);
      if (status.ok()) {
        r->num_waiting.store(resp.num_requests_waiting());
        r->num_running.store(resp.num_requests_running());
        r->kv_usage.store(resp.kv_usage_ratio());
        if (resp.has_kv_namespace()) AdoptNamespace(resp.kv_namespace());
        if (!r->healthy.exchange(true)) MOE_LOG_INFO("gateway: router {} is up", r->target);
      } else if (r->healthy.exchange(false)) {
        MOE_LOG_WARN("gateway: router {} is down: {}", r->target, status.error_message());
      }
    }
  }

  // Hash prompts exactly as the routers (and the kv-store) name their blocks.
  void AdoptNamespace(const pb::KvNamespace& ns) {
    if (ns.model_id().empty() || ns.block_size() <= 0) return;
    kv::BlockHashRootKey key{ns.model_id(), ns.block_size(),
                             ns.kv_dtype() == "bf16"  ? common::DType::kBF16
                             : ns.kv_dtype() == "f16" ? common::DType::kF16
                                                      : common::DType::kF32,
                             ""};
    key.checkpoint_fingerprint = ns.checkpoint_fingerprint();
    key.numerics = ns.numerics();
    absl::MutexLock lock(&root_mu_);
    if (SerializeRootKey(key) == SerializeRootKey(picker_.root)) return;
    picker_.root = key;
    root_ = kv::RootHash(key);
  }

  void PollLoop() {
    for (;;) {
      PollOnce();
      absl::MutexLock lock(&mu_);
      // Poll faster while no router is up, so readiness comes quickly after start.
      const absl::Duration wait = Ready()
                                      ? options_.stats_interval
                                      : std::min(options_.stats_interval, absl::Milliseconds(50));
      if (mu_.AwaitWithTimeout(absl::Condition(&stop_), wait)) return;
    }
  }

  const RoutingOptions options_;
  const std::string model_id_;
  mutable absl::Mutex root_mu_;
  RouterPickerOptions picker_ ABSL_GUARDED_BY(root_mu_);  // .root: the routers' namespace
  kv::BlockHash root_ ABSL_GUARDED_BY(root_mu_);
  std::vector<std::string> ids_;
  std::vector<std::unique_ptr<RouterConn>> routers_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread poller_;
};

void CallState::StartAttempt() {
  const int router = order_[attempt_];
  auto* reactor = new Reactor(shared_from_this(), &backend_->router(router));
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
    if (!cancelled) context_ = reactor->context();
  }
  if (!request_.http_request_id.empty()) {
    reactor->context()->AddMetadata(kRequestIdHeader, request_.http_request_id);
  }
  if (cancelled) {
    delete reactor;
    Release()->OnFailed(absl::CancelledError("cancelled"));
    return;
  }
  reactor->Start(proto_);
}

void CallState::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
}

void CallState::OnAttemptDone(const grpc::Status& status, bool got_message, bool finished) {
  if (finished) {
    Release();
    return;
  }
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
  }
  if (cancelled) {
    Release()->OnFailed(absl::CancelledError("cancelled"));
    return;
  }
  const bool retryable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED;
  if (!got_message && retryable && attempt_ + 1 < static_cast<int>(order_.size()) &&
      attempt_ + 1 < max_attempts_) {
    ++attempt_;
    StartAttempt();
    return;
  }
  if (status.ok()) {
    Release()->OnFailed(absl::InternalError("the router ended the stream without a finish"));
    return;
  }
  absl::Status s = common::rpc::FromGrpcStatus(status);
  Release()->OnFailed(absl::Status(
      s.code(),
      absl::StrCat("router ", backend_->router(order_[attempt_]).target, ": ", s.message())));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcBackend>> GrpcBackend::Create(const RoutingOptions& options,
                                                                 const std::string& model_id) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (options.routers.empty()) {
    return absl::InvalidArgumentError("routing.routers: at least one router is needed");
  }
  auto backend = std::make_unique<Backend>(options, model_id);
  if (absl::Status s = backend->Init(); !s.ok()) return s;
  return std::unique_ptr<GrpcBackend>(std::move(backend));
}

}  // namespace moe::gateway
