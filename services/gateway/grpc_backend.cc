#include "services/gateway/grpc_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
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
  // routing.batch_stream: the open GenerateBatch stream (replaced once it ends); `closing` once
  // the backend is being destroyed (no new stream).
  absl::Mutex batch_mu;
  std::shared_ptr<class BatchStream> batch ABSL_GUARDED_BY(batch_mu);
  bool closing ABSL_GUARDED_BY(batch_mu) = false;
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
  void StartBatchAttempt(RouterConn& router);
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
    cancel_batch_ = nullptr;
  }
  const std::string& http_request_id() const { return request_.http_request_id; }
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
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
  // The attempt's cancel on a GenerateBatch stream (instead of context_).
  std::function<void()> cancel_batch_ ABSL_GUARDED_BY(mu_);
  int batch_generation_ ABSL_GUARDED_BY(mu_) = 0;  // StartBatchAttempt's, one per attempt
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

// One GenerateBatch stream to one router (routing.batch_stream): the requests this gateway sends
// that router share it, and each router step arrives as one message for all of them. Reads
// all the time; each request's flow control is its credit window (router.proto): an item's
// credit goes back once the observer is ready for more (WhenReady), gathered into few writes.
// Holds itself from Open until OnDone.
class BatchStream final
    : public grpc::ClientBidiReactor<pb::GenerateBatchRequest, pb::GenerateBatchResponse>,
      public std::enable_shared_from_this<BatchStream> {
 public:
  BatchStream(RouterConn* router, int32_t window) : router_(router), window_(window) {}
  // Counted live until destroyed, not only until OnDone: another holder (a pending credit, a
  // call's cancel) may drop the last reference later, and the ClientContext it then destroys
  // must not outlive the channel (~Backend waits for the count).
  ~BatchStream() override {
    if (opened_) g_live_reactors.fetch_sub(1);
  }

  void Open() {
    self_ = shared_from_this();
    opened_ = true;
    g_live_reactors.fetch_add(1);
    router_->stub->async()->GenerateBatch(&context_, this);
    // Writes start from other threads (a new request, a credit): the hold keeps OnDone away
    // until the reads have ended and `ended_` stops new writes (gRPC's documented pattern).
    AddHold();
    StartRead(&response_);
    StartCall();
  }

  // Sends the request on this stream. False once the stream has ended (open another).
  bool Add(const std::shared_ptr<CallState>& state, const pb::GenerateRequest& proto,
           uint64_t* id_out) {
    absl::ReleasableMutexLock lock(&mu_);
    if (ended_) return false;
    const uint64_t id = next_id_++;
    auto call = std::make_shared<Call>();
    call->state = state;
    calls_.emplace(id, std::move(call));
    pb::BatchStart* start = pending_.add_starts();
    start->set_id(id);
    *start->mutable_request() = proto;
    start->set_http_request_id(state->http_request_id());
    start->set_window(window_);
    router_->in_flight.fetch_add(1);
    *id_out = id;
    lock.Release();
    Flush();
    return true;
  }

  void Cancel(uint64_t id) {
    {
      absl::MutexLock lock(&mu_);
      if (ended_ || !calls_.contains(id)) return;
      pending_.add_cancels(id);
    }
    Flush();
  }

  void Close() { context_.TryCancel(); }

  void OnWriteDone(bool ok) override {
    bool release_hold;
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      release_hold = ended_;
    }
    if (release_hold) {  // the reads ended while this write was being started or in flight
      RemoveHold();
      return;
    }
    if (ok) Flush();  // else the stream broke: the reads end too
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the stream ended: no more writes start, and OnDone follows
      bool write_out;
      {
        absl::MutexLock lock(&mu_);
        ended_ = true;
        // A Flush may be between its check and StartWrite: the hold stays until that write's
        // OnWriteDone, so OnDone (and the delete) cannot come before the StartWrite.
        write_out = writing_;
      }
      if (!write_out) RemoveHold();
      return;
    }
    for (const pb::BatchItem& item : response_.items()) Deliver(item);
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> left;
    {
      absl::MutexLock lock(&mu_);
      ended_ = true;
      left.swap(calls_);
    }
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !got_any_) {
      router_->healthy.store(false);
    }
    // A request that got nothing may go to another router (UNAVAILABLE is retried); one that
    // streamed ends with the stream's status, as a broken Generate call would.
    const grpc::Status unstarted(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("the router's stream ended: ", status.error_message()));
    for (auto& [id, call] : left) {
      router_->in_flight.fetch_sub(1);
      call->state->ClearAttempt();
      const bool got = call->got_message;
      call->state->OnAttemptDone(got ? (status.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                                                   "the router's stream ended")
                                                    : status)
                                     : unstarted,
                                 got, false);
    }
    std::shared_ptr<BatchStream> self = std::move(self_);  // may delete this on return
  }

 private:
  struct Call {
    std::shared_ptr<CallState> state;
    bool got_message = false;    // only the reading thread
    int32_t delivered = 0;       // items given to the observer, not yet credited (under mu_)
    int32_t owed = 0;            // credits gathered, not yet sent (under mu_)
    bool ready_pending = false;  // a WhenReady is out (under mu_)
  };

  void Deliver(const pb::BatchItem& item) {
    std::shared_ptr<Call> call;
    const bool last =
        item.status_code() != 0 || item.response().finish_reason() != pb::FINISH_REASON_UNSPECIFIED;
    {
      absl::MutexLock lock(&mu_);
      auto it = calls_.find(item.id());
      if (it == calls_.end()) return;
      call = it->second;
      if (last) calls_.erase(it);
    }
    CallState& state = *call->state;
    if (item.status_code() != 0) {  // refused before its first token
      router_->in_flight.fetch_sub(1);
      state.ClearAttempt();
      state.OnAttemptDone(
          grpc::Status(static_cast<grpc::StatusCode>(item.status_code()), item.status_message()),
          false, false);
      return;
    }
    if (state.cancelled()) {  // nothing more reaches the observer; the router's ABORT ends it
      if (last) {
        router_->in_flight.fetch_sub(1);
        state.ClearAttempt();
        state.OnAttemptDone(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"),
                            call->got_message, false);
      }
      return;
    }
    call->got_message = true;
    got_any_ = true;
    state.observer().OnUpdate(FromProto(item.response()));
    if (last) {
      router_->in_flight.fetch_sub(1);
      state.ClearAttempt();
      state.OnAttemptDone(grpc::Status::OK, true, true);
      return;
    }
    {
      absl::MutexLock lock(&mu_);
      ++call->delivered;
      if (call->ready_pending) return;  // its run credits this item too
      call->ready_pending = true;
    }
    state.observer().WhenReady(
        [self = shared_from_this(), id = item.id(), call] { self->Credit(id, *call); });
  }

  // The observer took every item delivered so far: they go back as credit, in writes of at
  // least half a window (one per few steps, not one per token).
  void Credit(uint64_t id, Call& call) {
    absl::ReleasableMutexLock lock(&mu_);
    call.owed += call.delivered;
    call.delivered = 0;
    call.ready_pending = false;
    if (ended_ || !calls_.contains(id) || call.owed < std::max(1, window_ / 2)) return;
    pb::BatchCredit* credit = pending_.add_credits();
    credit->set_id(id);
    credit->set_items(call.owed);
    call.owed = 0;
    lock.Release();
    Flush();
  }

  // Starts writing what is pending unless a write is in flight (its OnWriteDone comes back
  // here). Not under mu_: gRPC may run a reaction inline.
  void Flush() {
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || ended_) return;
      if (pending_.starts_size() == 0 && pending_.cancels_size() == 0 &&
          pending_.credits_size() == 0) {
        return;
      }
      writing_ = true;
      writing_msg_.Clear();
      writing_msg_.Swap(&pending_);
    }
    StartWrite(&writing_msg_);
  }

  RouterConn* const router_;
  const int32_t window_;
  std::shared_ptr<BatchStream> self_;  // from Open until OnDone
  bool opened_ = false;
  grpc::ClientContext context_;
  pb::GenerateBatchResponse response_;  // the reading thread's
  bool got_any_ = false;                // the reading thread's (and OnDone, after it)
  absl::Mutex mu_;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, std::shared_ptr<Call>> calls_ ABSL_GUARDED_BY(mu_);
  pb::GenerateBatchRequest pending_ ABSL_GUARDED_BY(mu_);  // the next write
  pb::GenerateBatchRequest writing_msg_;                   // the one in flight (while writing_)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
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
    for (auto& r : routers_) {
      std::shared_ptr<BatchStream> stream;
      {
        absl::MutexLock lock(&r->batch_mu);
        r->closing = true;
        stream = std::move(r->batch);
      }
      if (stream != nullptr) stream->Close();
    }
    // Calls still unwinding on gRPC threads use the stubs: let them finish first.
    for (int i = 0; i < 5000 && g_live_reactors.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  absl::Status Init() {
    for (const std::string& target : options_.routers) {
      auto conn = std::make_unique<RouterConn>();
      conn->target = target;
      // On a batch stream the credit windows are the flow control, and one HTTP/2 stream carries
      // every request: a 16 KiB window would stall a step's message of many requests (with
      // logprobs) on window updates, so the channel takes gRPC's default window with BDP probing.
      common::rpc::ChannelOptions channel_options = options_.channel;
      if (options_.batch_stream) channel_options.stream_window_bytes = 0;
      auto channel = common::rpc::CreateChannel(target, channel_options);
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
  bool batch_stream() const { return options_.batch_stream; }
  int32_t batch_window() const { return options_.batch_window; }

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
  if (backend_->batch_stream()) {
    StartBatchAttempt(backend_->router(router));
    return;
  }
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

void CallState::StartBatchAttempt(RouterConn& router) {
  int generation;
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    cancelled = cancelled_;
    generation = ++batch_generation_;
  }
  if (cancelled) {
    Release()->OnFailed(absl::CancelledError("cancelled"));
    return;
  }
  // The router's open stream, or a new one when it has ended (at most twice: a stream that
  // ended between the two looks is replaced once more).
  for (int tries = 0; tries < 2; ++tries) {
    std::shared_ptr<BatchStream> stream;
    {
      absl::MutexLock lock(&router.batch_mu);
      if (router.closing) break;
      if (router.batch == nullptr || tries > 0) {
        router.batch = std::make_shared<BatchStream>(&router, backend_->batch_window());
        router.batch->Open();
      }
      stream = router.batch;
    }
    uint64_t id = 0;
    if (!stream->Add(shared_from_this(), proto_, &id)) continue;
    absl::ReleasableMutexLock lock(&mu_);
    // The reply may have come (and a retry started) before Add returned: only this attempt's
    // own cancel is kept.
    if (generation != batch_generation_) return;
    if (cancelled_) {  // a cancel that came while the start was being sent
      lock.Release();
      stream->Cancel(id);
    } else {
      cancel_batch_ = [stream, id] { stream->Cancel(id); };
    }
    return;
  }
  OnAttemptDone(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the gateway is shutting down"), false,
                false);
}

void CallState::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (context_ != nullptr) context_->TryCancel();
  if (cancel_batch_) cancel_batch_();
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
