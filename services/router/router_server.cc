#include "services/router/router_server.h"

#include <algorithm>
#include <deque>
#include <list>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/grpc/blocking_bidi_call.h"
#include "common/grpc/status.h"
#include "services/router/placement_proto.h"

namespace moe::router {
namespace {

namespace pb = ::moe::router::v1;
using generation::FinishReason;

void AddLogprobs(const engine::SampledToken& t, pb::GenerateResponse* response) {
  pb::TokenLogprobs* lp = response->add_logprobs();
  lp->set_logprob(t.logprob);
  for (const engine::TokenLogprob& top : t.top) {
    pb::TopLogprob* tl = lp->add_top_logprobs();
    tl->set_token_id(top.token_id);
    tl->set_logprob(top.logprob);
  }
}

pb::FinishReason ToProto(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return pb::FINISH_REASON_STOP;
    case FinishReason::kLength:
      return pb::FINISH_REASON_LENGTH;
    case FinishReason::kAbort:
      return pb::FINISH_REASON_ABORT;
    case FinishReason::kError:
      return pb::FINISH_REASON_ERROR;
    case FinishReason::kNone:
      break;
  }
  return pb::FINISH_REASON_UNSPECIFIED;
}

bool PrintableAscii(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
}

// The gateway's x-request-id metadata (the id a client can follow through every log line), or
// "-" when absent or not printable.
std::string HttpRequestId(const ::grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto it = metadata.find("x-request-id");
  if (it == metadata.end()) return "-";
  std::string id(it->second.data(), it->second.size());
  if (id.empty() || id.size() > 128 || !PrintableAscii(id)) return "-";
  return id;
}

const char* FinishReasonName(pb::FinishReason reason) {
  switch (reason) {
    case pb::FINISH_REASON_STOP:
      return "stop";
    case pb::FINISH_REASON_LENGTH:
      return "length";
    case pb::FINISH_REASON_ABORT:
      return "abort";
    case pb::FINISH_REASON_ERROR:
      return "error";
    default:
      return "none";
  }
}

absl::StatusOr<generation::Constraint> ConstraintFromProto(const pb::Constraint& c) {
  generation::Constraint out;
  switch (c.kind_case()) {
    case pb::Constraint::kJsonSchema:
      out.kind = generation::ConstraintKind::kJsonSchema;
      out.spec = c.json_schema();
      break;
    case pb::Constraint::kJsonObject:
      if (!c.json_object())
        return absl::InvalidArgumentError("constraint.json_object must be true");
      out.kind = generation::ConstraintKind::kJsonObject;
      break;
    case pb::Constraint::kRegex:
      out.kind = generation::ConstraintKind::kRegex;
      out.spec = c.regex();
      break;
    case pb::Constraint::kChoice:
      out.kind = generation::ConstraintKind::kChoice;
      out.choices.assign(c.choice().choices().begin(), c.choice().choices().end());
      break;
    case pb::Constraint::KIND_NOT_SET:
      break;
  }
  if (absl::Status s = out.Validate(); !s.ok()) return s;
  return out;
}

// How often a waiting Generate call looks at whether its client is still there.
constexpr absl::Duration kCancelPollInterval = absl::Milliseconds(50);

}  // namespace

RouterServer::RouterServer(Scheduler& scheduler, RouterServerInfo info, common::Clock& clock,
                           const common::rpc::Authorizer& auth)
    : scheduler_(scheduler), info_(std::move(info)), clock_(clock), auth_(auth) {}

absl::StatusOr<GenerateRequest> RouterServer::FromProto(const pb::GenerateRequest& request) const {
  if (!request.model().empty() && request.model() != info_.model_name) {
    return absl::FailedPreconditionError(absl::StrCat(
        "this router serves model '", info_.model_name, "', not '", request.model(), "'"));
  }
  if (request.request_id().size() > 128 || !PrintableAscii(request.request_id())) {
    return absl::InvalidArgumentError("request_id must be 1..128 printable ASCII bytes");
  }
  if (request.cache_salt().size() > 256) {
    return absl::InvalidArgumentError("cache_salt is longer than 256 bytes");
  }
  if (request.prefill_only() && request.max_tokens() != 0) {
    return absl::InvalidArgumentError("prefill_only needs max_tokens 0");
  }
  if (request.max_tokens() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_tokens ", request.max_tokens(), " is negative"));
  }
  const int64_t prompt_len = request.prompt_token_ids_size();
  if (prompt_len >= info_.max_context) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt_len,
                                                   " tokens leaves no room in the context of ",
                                                   info_.max_context, " tokens"));
  }
  if (prompt_len + request.max_tokens() > info_.max_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt_len, ") + max_tokens (", request.max_tokens(),
                     ") exceeds the context of ", info_.max_context, " tokens"));
  }
  if (request.stop_token_ids_size() > 64) {
    return absl::InvalidArgumentError("more than 64 stop_token_ids");
  }
  if (request.top_logprobs() < 0 || request.top_logprobs() > 20) {
    return absl::InvalidArgumentError("top_logprobs must be in [0, 20]");
  }
  if (request.top_logprobs() > 0 && !request.logprobs()) {
    return absl::InvalidArgumentError("top_logprobs needs logprobs");
  }
  GenerateRequest out;
  out.prompt_token_ids.assign(request.prompt_token_ids().begin(), request.prompt_token_ids().end());
  const auto& sp = request.sampling();
  generation::SamplingParams& s = out.sampling;
  s.temperature = sp.temperature();  // unset = 0 = greedy
  s.top_p = sp.top_p() == 0 ? 1.0f : sp.top_p();
  s.top_k = sp.top_k();
  s.min_p = sp.min_p();
  if (sp.has_seed()) s.seed = sp.seed();
  s.repetition_penalty = sp.repetition_penalty() == 0 ? 1.0f : sp.repetition_penalty();
  s.frequency_penalty = sp.frequency_penalty();
  s.presence_penalty = sp.presence_penalty();
  for (const auto& [token, bias] : sp.logit_bias()) s.logit_bias[token] = bias;
  s.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  s.ignore_eos = request.ignore_eos();
  s.logprobs = request.logprobs() ? request.top_logprobs() : -1;
  // 0 = until a stop token or the end of the context; the scheduler's 0 is prefill only.
  s.max_tokens = request.prefill_only()     ? 0
                 : request.max_tokens() > 0 ? request.max_tokens()
                                            : static_cast<int32_t>(info_.max_context - prompt_len);
  out.priority = request.priority();
  out.cache_salt = request.cache_salt();
  if (request.has_constraint()) {
    absl::StatusOr<generation::Constraint> constraint = ConstraintFromProto(request.constraint());
    if (!constraint.ok()) return constraint.status();
    if (constraint->active()) {
      if (grammar_cache_ == nullptr) {
        return absl::FailedPreconditionError(
            "this router has no tokenizer for the model, so it cannot apply a constraint");
      }
      absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> compiled =
          grammar_cache_->Get(*constraint);
      if (!compiled.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("constraint: ", compiled.status().message()));
      }
      out.grammar = *std::move(compiled);
    }
  }
  if (request.timeout_ms() > 0) {
    out.deadline = clock_.Now() + absl::Milliseconds(request.timeout_ms());
  }
  return out;
}

namespace {

// The messages of one stream event, as Generate streams them: one per token (a response-cache
// hit, or a consumer that fell behind, reads several at once: the same chunks either way), the
// last one with the finish reason and usage when the event is final (then logged).
void ToResponses(const StreamEvent& event, const std::string& http_id,
                 const std::string& request_id, std::vector<pb::GenerateResponse>* out) {
  const size_t n = event.token_ids.size();
  for (size_t i = 0; i < n; ++i) {
    pb::GenerateResponse& one = out->emplace_back();
    one.add_token_ids(event.token_ids[i]);
    if (i < event.logprobs.size()) AddLogprobs(event.logprobs[i], &one);
  }
  if (!event.final()) return;
  if (n == 0) out->emplace_back();
  pb::GenerateResponse& response = out->back();
  response.set_finish_reason(ToProto(event.finish_reason));
  pb::Usage* usage = response.mutable_usage();
  usage->set_prompt_tokens(static_cast<int32_t>(event.usage.prompt_tokens));
  usage->set_completion_tokens(static_cast<int32_t>(event.usage.completion_tokens));
  usage->set_cached_prompt_tokens(static_cast<int32_t>(event.usage.cached_prompt_tokens));
  usage->set_from_response_cache(event.usage.from_response_cache);
  if (!event.status.ok()) response.set_error_message(std::string(event.status.message()));
  if (event.status.ok()) {
    MOE_LOG_INFO("router: {} {} finished {}: {} prompt ({} cached) + {} generated tokens", http_id,
                 request_id, FinishReasonName(response.finish_reason()), usage->prompt_tokens(),
                 usage->cached_prompt_tokens(), usage->completion_tokens());
  } else {
    MOE_LOG_WARN("router: {} {} finished {}: {}", http_id, request_id,
                 FinishReasonName(response.finish_reason()), event.status.ToString());
  }
}

}  // namespace

absl::StatusOr<SubmittedRequest> RouterServer::Admit(const pb::GenerateRequest& request,
                                                     const std::string& http_id) {
  absl::StatusOr<GenerateRequest> converted = FromProto(request);
  if (!converted.ok()) {
    MOE_LOG_INFO("router: {} {} refused: {}", http_id, request.request_id(),
                 converted.status().ToString());
    return converted.status();
  }
  const std::string& request_id = request.request_id();
  if (!request_id.empty()) {
    absl::MutexLock lock(&mu_);
    if (!active_request_ids_.insert(request_id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("request_id '", request_id, "' is already running"));
    }
  }
  absl::StatusOr<SubmittedRequest> submitted = scheduler_.Submit(*std::move(converted));
  if (!submitted.ok()) {
    ReleaseRequestId(request_id);
    MOE_LOG_WARN("router: {} {} refused: {}", http_id, request_id, submitted.status().ToString());
  }
  return submitted;
}

void RouterServer::ReleaseRequestId(const std::string& request_id) {
  if (request_id.empty()) return;
  absl::MutexLock lock(&mu_);
  active_request_ids_.erase(request_id);
}

::grpc::Status RouterServer::Generate(::grpc::ServerContext* context,
                                      const pb::GenerateRequest* request,
                                      ::grpc::ServerWriter<pb::GenerateResponse>* writer) {
  if (::grpc::Status s = auth_.Check(*context, kGeneratePolicy); !s.ok()) return s;
  // One log line per request, with the gateway's x-request-id (deploy/RUNBOOK.md).
  const std::string http_id = HttpRequestId(*context);
  const std::string& request_id = request->request_id();
  absl::StatusOr<SubmittedRequest> submitted = Admit(*request, http_id);
  if (!submitted.ok()) return common::rpc::ToGrpcStatus(submitted.status());
  bool cancelled = false;
  std::vector<pb::GenerateResponse> responses;
  for (;;) {
    std::optional<StreamEvent> event = submitted->stream->Next(kCancelPollInterval);
    if (!event.has_value()) {
      if (!cancelled && context->IsCancelled()) {
        scheduler_.Cancel(submitted->seq_id);
        cancelled = true;
      }
      continue;
    }
    responses.clear();
    ToResponses(*event, http_id, request_id, &responses);
    for (const pb::GenerateResponse& response : responses) {
      if (cancelled) break;
      if (!writer->Write(response)) {
        // The client is gone: free its blocks, then wait for the scheduler to confirm.
        scheduler_.Cancel(submitted->seq_id);
        cancelled = true;
      }
    }
    if (event->final()) break;
  }
  ReleaseRequestId(request_id);
  if (cancelled) return ::grpc::Status(::grpc::StatusCode::CANCELLED, "client went away");
  return ::grpc::Status::OK;
}

// One GenerateBatch stream's requests. The reading thread (the handler's) starts, cancels and
// credits them; the writing thread waits, woken at most once per scheduler step, and gathers
// every request's new tokens into one message.
class RouterServer::BatchSession {
 public:
  BatchSession(RouterServer& server, std::string peer_http_id)
      : server_(server), default_http_id_(std::move(peer_http_id)) {}

  // New starts are refused; the stream ends once what runs has finished.
  void Drain() {
    absl::MutexLock lock(&mu_);
    draining_ = true;
  }

  // A refusal comes back as an item at once (through the writer).
  void Start(const pb::BatchStart& start) {
    const std::string http_id = start.http_request_id().empty() ||
                                        start.http_request_id().size() > 128 ||
                                        !PrintableAscii(start.http_request_id())
                                    ? default_http_id_
                                    : start.http_request_id();
    absl::Status bad;
    if (start.window() < 0 || start.window() > kMaxWindow) {
      bad = absl::InvalidArgumentError(
          absl::StrCat("window ", start.window(), " is outside [0, ", kMaxWindow, "]"));
    } else {
      absl::MutexLock lock(&mu_);
      if (draining_) bad = absl::UnavailableError("router is draining");
      if (calls_.contains(start.id())) {
        bad = absl::InvalidArgumentError(
            absl::StrCat("id ", start.id(), " is already running on this stream"));
      }
    }
    absl::StatusOr<SubmittedRequest> submitted =
        bad.ok() ? server_.Admit(start.request(), http_id) : absl::StatusOr<SubmittedRequest>(bad);
    absl::MutexLock lock(&mu_);
    if (!submitted.ok()) {
      pb::BatchItem& item = refusals_.emplace_back();
      item.set_id(start.id());
      const ::grpc::Status status = common::rpc::ToGrpcStatus(submitted.status());
      item.set_status_code(static_cast<int32_t>(status.error_code()));
      item.set_status_message(status.error_message());
      ready_ = true;
      return;
    }
    Call& call = calls_[start.id()];
    call.submitted = *std::move(submitted);
    call.http_id = http_id;
    call.request_id = start.request().request_id();
    call.credit = start.window() == 0 ? kDefaultWindow : start.window();
    order_.push_back(start.id());
    // A response-cache hit is finished already; anything else shows at the next step.
    if (call.submitted.stream->HasOutput()) ready_ = true;
  }

  void Cancel(uint64_t id) {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it != calls_.end()) server_.scheduler_.Cancel(it->second.submitted.seq_id);
  }

  void Credit(uint64_t id, int32_t items) {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(id);
    if (it == calls_.end() || items <= 0) return;
    it->second.credit = std::min<int64_t>(it->second.credit + items, kMaxWindow);
    if (HasOutputLocked(it->second)) ready_ = true;
  }

  // The reader is done: half-closed (`gone` false: finish what runs) or the caller went away
  // (`gone`: cancel everything).
  void ReaderDone(bool gone) {
    std::vector<std::string> ids;
    {
      absl::MutexLock lock(&mu_);
      reader_done_ = true;
      if (gone) AbandonAllLocked(&ids);
    }
    for (const std::string& id : ids) server_.ReleaseRequestId(id);
  }

  bool reader_done() {
    absl::MutexLock lock(&mu_);
    return reader_done_;
  }

  // From the scheduler's stepping thread, after each step.
  void OnStep() {
    absl::MutexLock lock(&mu_);
    if (ready_) return;
    for (const auto& [id, call] : calls_) {
      if (call.credit > 0 && HasOutputLocked(call)) {
        ready_ = true;
        return;
      }
    }
  }

  // The writing thread's loop: gathers what is ready, writes it (`write` returns once the
  // message is sent; false: the caller is gone), until the reader is done and every request has
  // ended, or a write fails.
  void WriteLoop(absl::FunctionRef<bool(const pb::GenerateBatchResponse&)> write) {
    pb::GenerateBatchResponse message;
    std::vector<pb::GenerateResponse> responses;
    // Released after mu_ (RouterServer::mu_ is taken before a session's, in BeginDrain).
    std::vector<std::string> ended_ids;
    for (;;) {
      message.Clear();
      ended_ids.clear();
      {
        absl::MutexLock lock(&mu_);
        auto over = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return (reader_done_ || draining_) && calls_.empty() && refusals_.empty();
        };
        auto wake = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ready_ || over(); };
        mu_.Await(absl::Condition(&wake));
        if (over()) return;
        ready_ = false;
        for (pb::BatchItem& item : refusals_) *message.add_items() = std::move(item);
        refusals_.clear();
        // In start order; each request sends what its credit allows, the rest waits.
        for (auto it = order_.begin(); it != order_.end();) {
          auto found = calls_.find(*it);
          Call& call = found->second;
          while (call.credit > 0) {
            if (call.backlog.empty()) {
              if (call.final_in_backlog) break;
              std::optional<StreamEvent> event = call.submitted.stream->Next(absl::ZeroDuration());
              if (!event.has_value()) break;
              responses.clear();
              ToResponses(*event, call.http_id, call.request_id, &responses);
              for (pb::GenerateResponse& r : responses) call.backlog.push_back(std::move(r));
              call.final_in_backlog = event->final();
              continue;
            }
            pb::BatchItem* item = message.add_items();
            item->set_id(*it);
            *item->mutable_response() = std::move(call.backlog.front());
            call.backlog.pop_front();
            --call.credit;
          }
          if (call.backlog.empty() && call.final_in_backlog) {
            ended_ids.push_back(std::move(call.request_id));
            calls_.erase(found);
            it = order_.erase(it);
          } else {
            ++it;
          }
        }
      }
      for (const std::string& id : ended_ids) server_.ReleaseRequestId(id);
      ended_ids.clear();
      if (message.items_size() > 0 && !write(message)) {  // the caller is gone
        {
          absl::MutexLock lock(&mu_);
          AbandonAllLocked(&ended_ids);
        }
        for (const std::string& id : ended_ids) server_.ReleaseRequestId(id);
        return;
      }
    }
  }

 private:
  static constexpr int32_t kDefaultWindow = 16;
  static constexpr int32_t kMaxWindow = 1024;

  struct Call {
    SubmittedRequest submitted;
    std::string http_id;
    std::string request_id;
    int64_t credit = 0;  // items that may still be sent
    // Items read from the stream but beyond the credit; the last is final when final_in_backlog.
    std::deque<pb::GenerateResponse> backlog;
    bool final_in_backlog = false;
  };

  static bool HasOutputLocked(const Call& call) {
    return !call.backlog.empty() || call.submitted.stream->HasOutput();
  }

  // Cancels every request in the scheduler and forgets them (their request_ids into `ids`, to be
  // released once mu_ is let go).
  void AbandonAllLocked(std::vector<std::string>* ids) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto& [id, call] : calls_) {
      server_.scheduler_.Cancel(call.submitted.seq_id);
      ids->push_back(std::move(call.request_id));
    }
    calls_.clear();
    order_.clear();
  }

  RouterServer& server_;
  const std::string default_http_id_;
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Call> calls_ ABSL_GUARDED_BY(mu_);
  std::list<uint64_t> order_ ABSL_GUARDED_BY(mu_);  // calls_' ids in start order
  std::vector<pb::BatchItem> refusals_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;  // the writer has something to look at
  bool reader_done_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

namespace {

using BatchCall =
    common::rpc::BlockingBidiCall<pb::GenerateBatchRequest, pb::GenerateBatchResponse>;

// A call refused before it starts (auth): finished at once, no thread.
class RefusedBatch final
    : public ::grpc::ServerBidiReactor<pb::GenerateBatchRequest, pb::GenerateBatchResponse> {
 public:
  explicit RefusedBatch(::grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

::grpc::ServerBidiReactor<pb::GenerateBatchRequest, pb::GenerateBatchResponse>*
RouterServer::GenerateBatch(::grpc::CallbackServerContext* context) {
  if (::grpc::Status s = auth_.Check(*context, kGenerateBatchPolicy); !s.ok())
    return new RefusedBatch(std::move(s));
  return BatchCall::Start(context, [this](BatchCall& call) { return ServeBatch(call); });
}

// The call's own thread reads (a start may block: a grammar compile, a response-cache lookup);
// the writer thread gathers once per step and writes.
::grpc::Status RouterServer::ServeBatch(BatchCall& stream) {
  ::grpc::CallbackServerContext* const context = stream.context();
  BatchSession session(*this, HttpRequestId(*context));
  {
    absl::MutexLock lock(&mu_);
    sessions_.insert(&session);
    if (draining_) session.Drain();
  }
  const int64_t listener = scheduler_.AddStepListener([&session] { session.OnStep(); });
  std::thread writer([&] {
    session.WriteLoop(
        [&](const pb::GenerateBatchResponse& message) { return stream.Write(message); });
    // Drained, or the caller is gone, while the reader still waits: unblock it, so the call ends.
    if (!session.reader_done()) context->TryCancel();
  });
  pb::GenerateBatchRequest request;
  while (stream.Read(&request)) {
    for (const pb::BatchStart& start : request.starts()) session.Start(start);
    for (uint64_t id : request.cancels()) session.Cancel(id);
    for (const pb::BatchCredit& credit : request.credits())
      session.Credit(credit.id(), credit.items());
  }
  session.ReaderDone(/*gone=*/context->IsCancelled());
  writer.join();
  scheduler_.RemoveStepListener(listener);
  {
    absl::MutexLock lock(&mu_);
    sessions_.erase(&session);
  }
  if (context->IsCancelled())
    return ::grpc::Status(::grpc::StatusCode::CANCELLED, "client went away");
  return ::grpc::Status::OK;
}

void RouterServer::BeginDrain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
  for (BatchSession* session : sessions_) session->Drain();
}

::grpc::Status RouterServer::GetStats(::grpc::ServerContext* context,
                                      const pb::GetStatsRequest* request,
                                      pb::GetStatsResponse* response) {
  if (::grpc::Status s = auth_.Check(*context, kGetStatsPolicy); !s.ok()) return s;
  const SchedulerStats stats = scheduler_.GetStats();
  response->set_router_id(info_.router_id);
  response->set_model(info_.model_name);
  response->set_num_requests_waiting(static_cast<int32_t>(stats.num_waiting));
  response->set_num_requests_running(static_cast<int32_t>(stats.num_running));
  response->set_kv_blocks_total(stats.kv.num_blocks_total);
  // router.proto counts cached (unreferenced) blocks as used.
  const int64_t used = stats.kv.num_blocks_used + stats.kv.num_blocks_cached;
  response->set_kv_blocks_used(used);
  response->set_kv_usage_ratio(
      stats.kv.num_blocks_total > 0 ? static_cast<float>(used) / stats.kv.num_blocks_total : 0.0f);
  response->set_placement_version(0);
  pb::KvNamespace* ns = response->mutable_kv_namespace();
  ns->set_model_id(info_.kv_namespace.model_id);
  ns->set_checkpoint_fingerprint(info_.kv_namespace.checkpoint_fingerprint);
  ns->set_block_size(info_.kv_namespace.block_size);
  ns->set_kv_dtype(std::string(common::DTypeName(info_.kv_namespace.kv_dtype)));
  ns->set_numerics(info_.kv_namespace.numerics);
  pb::ExpertLoadWindow* load = response->mutable_expert_load();
  load->set_window_ms(0);
  load->set_num_layers(static_cast<int32_t>(info_.num_layers));
  load->set_num_experts(static_cast<int32_t>(info_.num_experts));
  if (experts_ == nullptr) {  // in-process experts: no placement, no load window
    load->mutable_tokens()->Resize(static_cast<int>(info_.num_layers * info_.num_experts), 0);
    return ::grpc::Status::OK;
  }
  const auto table = experts_->placement();
  response->set_placement_version(table->version);
  PlacementToProto(*table, response->mutable_placement());
  const absl::Duration span = request->load_window_ms() > 0
                                  ? absl::Milliseconds(request->load_window_ms())
                                  : absl::Minutes(5);
  const LoadWindow window = experts_->load_tracker().Window(span);
  load->set_window_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(window.span)));
  for (uint64_t t : window.expert_tokens) load->add_tokens(t);
  for (const auto& [id, tokens] : window.worker_tokens) {  // std::map: increasing worker id
    pb::WorkerLoad* w = load->add_workers();
    w->set_worker_id(id);
    w->mutable_tokens()->Add(tokens.begin(), tokens.end());
  }
  return ::grpc::Status::OK;
}

::grpc::Status RouterServer::SetPlacement(::grpc::ServerContext* context,
                                          const pb::SetPlacementRequest* request,
                                          pb::SetPlacementResponse* response) {
  if (::grpc::Status s = auth_.Check(*context, kSetPlacementPolicy); !s.ok()) return s;
  if (experts_ == nullptr) {
    return ::grpc::Status(::grpc::StatusCode::UNIMPLEMENTED,
                          "SetPlacement: this router runs its experts in-process");
  }
  auto table = PlacementFromProto(request->placement());
  if (!table.ok()) return common::rpc::ToGrpcStatus(table.status());
  const uint64_t version = table->version;
  auto previous = experts_->SetPlacement(*std::move(table));
  if (!previous.ok()) return common::rpc::ToGrpcStatus(previous.status());
  response->set_active_version(version);
  response->set_previous_version(*previous);
  return ::grpc::Status::OK;
}

}  // namespace moe::router
