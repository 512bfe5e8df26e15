#include "services/router/core/scheduler.h"

#include <algorithm>
#include <deque>
#include <random>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"
#include "services/router/core/kv_fetcher.h"
#include "services/router/core/response_cache_key.h"
#include "services/router/core/schedule_stages.h"
#include "services/router/core/sequence_state.h"
#include "services/router/core/step_plan.h"

namespace moe::router {

using common::SeqId;
using generation::FinishReason;
using generation::Usage;

namespace {

// The fetch deadline policy (scheduler.h): a sequence waits for its prefix from the kv tier
// the tier's fetch_timeout(), or twice the time the prefill of those tokens is estimated to
// take (measured prefill throughput) when that is longer, at most kMaxFetchWait.
constexpr absl::Duration kMaxFetchWait = absl::Seconds(10);
constexpr double kFetchWaitOverPrefill = 2.0;
// How much longer than its deadline the stepping thread lets the tier return on its own (with
// what arrived intact) before it gives up on the fetch and prefills everything.
constexpr absl::Duration kFetchGiveUpGrace = absl::Milliseconds(500);
// A step counts towards the prefill throughput estimate when it computed this many prompt tokens.
constexpr int64_t kMinPrefillTokensToEstimate = 32;

}  // namespace

class Scheduler::Impl {
 public:
  Impl(const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
       ModelRunner& runner, KvTier& kv_tier, common::Clock& clock, RouterMetrics& metrics);
  ~Impl();

  absl::StatusOr<SubmittedRequest> Submit(GenerateRequest request) ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel(SeqId seq_id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t Step() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_LOCKS_EXCLUDED(mu_);
  SchedulerStats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t AddStepListener(std::function<void()> fn) ABSL_LOCKS_EXCLUDED(listeners_mu_);
  void RemoveStepListener(int64_t handle) ABSL_LOCKS_EXCLUDED(listeners_mu_);
  // Runs the step listeners (after a step, after AbortAll).
  void NotifyStepListeners() ABSL_LOCKS_EXCLUDED(listeners_mu_);

  kv::BlockManager& block_manager() { return *block_manager_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  // The scheduler's record of one request: the stages' view (SequenceState) plus what only the
  // scheduler touches (the consumer's stream, sampling, timings).
  struct Sequence : SequenceState {
    GenerateRequest request;  // prompt_token_ids moved into `tokens`, cache_salt likewise
    std::shared_ptr<RequestStream> stream;
    int64_t num_prompt = 0;
    int64_t num_generated = 0;
    bool finished = false;
    bool admitted_once = false;
    int64_t cached_prompt_tokens = 0;
    uint64_t seed = 0;
    std::unique_ptr<engine::SequenceSampler> sampler;  // made at first admission
    std::unique_ptr<grammar::GrammarMatcher> matcher;  // constrained only; first admission too
    absl::Time arrival;
    absl::Time first_token = absl::InfinitePast();
    absl::Time last_token = absl::InfinitePast();
    // Leading full blocks already in (or queued for) the kv tier, or taken from it or from L1.
    int64_t num_blocks_stored = 0;
    // While `fetching`: the kv tier fetch of its further prefix, and whether what it brings
    // counts as cached prompt tokens (a first admission; not an offloaded sequence coming back).
    std::shared_ptr<KvFetcher::Job> fetch;
    bool fetch_counts_as_cached = false;
    // Set when the request may use the response cache: its key, and (with logprobs) what was
    // streamed, for the entry stored when it finishes.
    std::optional<kv::BlockHash> response_key;
    std::vector<engine::SampledToken> streamed_logprobs;
  };
  // Every SequenceState in queues_ and plan_ is a Sequence.
  static Sequence& Seq(SequenceState* s) { return *static_cast<Sequence*>(s); }

  // Lets a RequestStream (which may outlive the scheduler) wake the loop safely.
  struct Waker {
    absl::Mutex mu;
    Impl* scheduler ABSL_GUARDED_BY(mu) = nullptr;
    void Wake() {
      absl::MutexLock lock(&mu);
      if (scheduler != nullptr) scheduler->WakeLoop();
    }
  };

  absl::Status ValidateRequest(const GenerateRequest& request) const;
  void Loop();
  void WakeLoop() ABSL_LOCKS_EXCLUDED(mu_);
  // Takes new requests from the inbox and ends cancelled ones.
  void DrainInbox() ABSL_LOCKS_EXCLUDED(mu_);
  void ExpireDeadlines(absl::Time now);
  // Ends every request with kAbort / `status` (shutdown).
  void AbortAll(const absl::Status& status);
  // Ends `seq` (running or waiting): frees its blocks if it holds any, closes its stream,
  // records metrics. The caller (or the next RemoveFinished) drops it from the queues.
  void Finish(Sequence& seq, FinishReason reason, absl::Status status);
  // Carries out what plan_ (made at `start`) decided besides the engine batch: counts the
  // preemptions, ends the failures, sets up first admissions (sampler, queue metrics) and runs
  // the copy-on-write copies.
  void ApplyPlan(absl::Time start);
  // Runs plan_'s chunks as one engine step, then samples, streams and finishes. Returns the
  // tokens computed (0: no chunk, no step).
  int64_t RunBatch();
  // Adds the chunk to this step's engine batch unless its sequence ended while the plan ran.
  void AddChunk(const PlannedChunk& chunk);
  // Samples the next token of `seq` from `logits` [vocab] and handles stop / length.
  void ProcessLogits(Sequence& seq, const float* logits, absl::Time now);
  // Starts the kv tier fetch of the further prefix of this step's admissions that L1 missed
  // (they then wait, fetching, and their planned chunks are dropped).
  void FetchFromKvTier(absl::Time now);
  // Whether prefilling `tokens` is estimated to take at least options_.kv_fetch_min_saving.
  bool FetchMayPay(int64_t tokens) const;
  // How long a fetch of `tokens` prompt tokens may take (the deadline policy above).
  absl::Duration FetchTimeout(int64_t tokens) const;
  // Ends the fetches that are done, or past the point where the stepping thread gives up on them:
  // their fetched blocks become computed, the rest is prefilled from this step on.
  void PollFetches(absl::Time now);
  // Ends `seq`'s fetch with `fetched` blocks (`from_l2` of them from L2) computed.
  void EndFetch(Sequence& seq, int64_t fetched, int64_t from_l2, absl::Time now);
  // Cancels `seq`'s fetch (no write touches its pages once this returns); it counts as a miss.
  void CancelFetch(Sequence& seq);
  // Queues `seq`'s computed full blocks that are not in the kv tier yet: its prompt's, and its
  // generated tokens' too with options_.store_generated_blocks or `all` (an offloaded preemption).
  void StoreComputedBlocks(Sequence& seq, bool all = false);
  // The response cache's answer for `seq` (already validated and numbered), if it has one:
  // streams it, finishes the stream and counts it. Returns whether it answered.
  bool AnswerFromResponseCache(Sequence& seq, const CachedResponse& cached);
  void StoreResponse(const Sequence& seq, FinishReason reason);
  // A constrained sequence whose grammar is complete with nothing but an end token to follow:
  // appends the end token and finishes (kStop), or leaves it to the next step when the request
  // wants logprobs.
  void FinishCompleteGrammar(Sequence& seq);
  void RemoveFinished();
  void PublishStats(int64_t step_tokens, int64_t step_seqs) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const SchedulerOptions options_;
  ModelRunner& runner_;
  KvTier& kv_tier_;
  common::Clock& clock_;
  RouterMetrics& metrics_;
  const int64_t vocab_size_;
  const int64_t max_context_;
  const std::shared_ptr<Waker> waker_;

  // Owned by the stepping thread (the loop, or the caller of Step()).
  std::unique_ptr<kv::BlockManager> block_manager_;
  absl::flat_hash_map<SeqId, std::unique_ptr<Sequence>> sequences_;
  SchedulingQueues queues_;    // of Sequences, both in SchedulingOrder
  bool finished_any_ = false;  // RemoveFinished has work
  int64_t last_prefix_queries_ = 0;
  int64_t last_prefix_hits_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_finished_ = 0;
  int64_t num_steps_ = 0;
  // Reused by every step.
  StepPlan plan_;
  std::vector<StepChunk> chunks_;
  std::vector<Sequence*> chunk_seqs_;
  std::vector<float> logits_;
  // Prompt tokens per second of the engine's prefill steps (EWMA; 0 until measured).
  double prefill_tokens_per_s_ = 0;
  // The kv tier's fetch threads (only with a tier). Its jobs write only into the pages of
  // fetching sequences (kv_fetcher.h); its threads touch nothing of the scheduler but waker_.
  std::unique_ptr<KvFetcher> fetcher_;

  // Started by Start(), joined by Shutdown().
  std::thread loop_;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Sequence>> inbox_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<SeqId> cancels_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::mt19937_64 seed_rng_ ABSL_GUARDED_BY(mu_);
  int64_t num_queued_ ABSL_GUARDED_BY(mu_) = 0;  // inbox + waiting, against max_waiting
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time drain_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  absl::Time next_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool has_work_ ABSL_GUARDED_BY(mu_) = false;
  SchedulerStats stats_ ABSL_GUARDED_BY(mu_);

  // Held while the listeners run, so that RemoveStepListener waits for a running one.
  absl::Mutex listeners_mu_;
  std::vector<std::pair<int64_t, std::function<void()>>> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  int64_t next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 1;
};

// ---------------------------------------------------------------------------------------------
// Scheduler: the contract of scheduler.h, forwarded.

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
    ModelRunner& runner, common::Clock& clock, RouterMetrics& metrics) {
  static NoKvTier* const no_tier = new NoKvTier();
  return Create(options, std::move(block_manager), runner, *no_tier, clock, metrics);
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
    ModelRunner& runner, KvTier& kv_tier, common::Clock& clock, RouterMetrics& metrics) {
  RETURN_IF_ERROR(options.Validate());
  if (kv_tier.enabled() && kv_tier.block_bytes() != runner.kv_block_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: the kv tier moves blocks of ", kv_tier.block_bytes(),
                     " bytes, the KV cache's are ", runner.kv_block_bytes()));
  }
  if (block_manager == nullptr) return absl::InvalidArgumentError("scheduler: no block manager");
  if (block_manager->block_size() != runner.kv_block_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: block manager block size ", block_manager->block_size(),
                     " != KV cache block size ", runner.kv_block_size()));
  }
  if (block_manager->num_blocks() > runner.num_kv_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: block manager has ", block_manager->num_blocks(),
                     " blocks, the KV cache only ", runner.num_kv_blocks()));
  }
  return std::unique_ptr<Scheduler>(new Scheduler(
      std::make_unique<Impl>(options, std::move(block_manager), runner, kv_tier, clock, metrics)));
}

Scheduler::Scheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Scheduler::~Scheduler() = default;

absl::StatusOr<SubmittedRequest> Scheduler::Submit(GenerateRequest request) {
  return impl_->Submit(std::move(request));
}
void Scheduler::Cancel(SeqId seq_id) { impl_->Cancel(seq_id); }
absl::Status Scheduler::Start() { return impl_->Start(); }
void Scheduler::Shutdown(absl::Time deadline) { impl_->Shutdown(deadline); }
int64_t Scheduler::Step() { return impl_->Step(); }
int64_t Scheduler::AddStepListener(std::function<void()> fn) {
  return impl_->AddStepListener(std::move(fn));
}
void Scheduler::RemoveStepListener(int64_t handle) { impl_->RemoveStepListener(handle); }
bool Scheduler::HasWork() const { return impl_->HasWork(); }
SchedulerStats Scheduler::GetStats() const { return impl_->GetStats(); }
const kv::BlockManager& Scheduler::block_manager() const { return impl_->block_manager(); }
kv::BlockManager& Scheduler::mutable_block_manager() { return impl_->block_manager(); }
const SchedulerOptions& Scheduler::options() const { return impl_->options(); }

// ---------------------------------------------------------------------------------------------
// Scheduler::Impl

Scheduler::Impl::Impl(const SchedulerOptions& options,
                      std::unique_ptr<kv::BlockManager> block_manager, ModelRunner& runner,
                      KvTier& kv_tier, common::Clock& clock, RouterMetrics& metrics)
    : options_(options),
      runner_(runner),
      kv_tier_(kv_tier),
      clock_(clock),
      metrics_(metrics),
      vocab_size_(runner.vocab_size()),
      max_context_(runner.max_context()),
      waker_(std::make_shared<Waker>()),
      block_manager_(std::move(block_manager)),
      seed_rng_(options.random_seed) {
  if (kv_tier_.enabled()) {
    fetcher_ =
        std::make_unique<KvFetcher>(KvFetcher::Options{.num_threads = options_.kv_fetch_threads,
                                                       .max_fetches = options_.kv_fetch_max_fetches,
                                                       .max_bytes = options_.kv_fetch_max_bytes},
                                    kv_tier_, runner_, [waker = waker_] { waker->Wake(); });
  }
  absl::MutexLock lock(&waker_->mu);
  waker_->scheduler = this;
}

Scheduler::Impl::~Impl() {
  Shutdown(absl::InfinitePast());
  absl::MutexLock lock(&waker_->mu);
  waker_->scheduler = nullptr;
}

absl::Status Scheduler::Impl::ValidateRequest(const GenerateRequest& request) const {
  const auto& prompt = request.prompt_token_ids;
  if (prompt.empty()) return absl::InvalidArgumentError("prompt_token_ids is empty");
  if (request.priority < -1000 || request.priority > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority ", request.priority, " is outside [-1000, 1000]"));
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_token_ids[", i, "] = ", prompt[i],
                                                     " is outside the vocabulary [0, ", vocab_size_,
                                                     ")"));
    }
  }
  RETURN_IF_ERROR(request.sampling.Validate(vocab_size_));
  if (request.grammar != nullptr && request.grammar->vocabulary().size() != vocab_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the constraint was compiled for a vocabulary of ",
                     request.grammar->vocabulary().size(), " tokens; the model has ", vocab_size_));
  }
  const int64_t min_len =
      static_cast<int64_t>(prompt.size()) + (request.sampling.max_tokens > 0 ? 1 : 0);
  if (min_len > max_context_) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(),
                                                   " tokens does not fit the model context of ",
                                                   max_context_, " tokens"));
  }
  const int64_t bs = block_manager_->block_size();
  const int64_t blocks = (min_len + bs - 1) / bs;
  if (blocks > block_manager_->num_blocks()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", prompt.size(), " tokens needs ",
                                                   blocks, " KV blocks; the cache has ",
                                                   block_manager_->num_blocks()));
  }
  return absl::OkStatus();
}

absl::StatusOr<SubmittedRequest> Scheduler::Impl::Submit(GenerateRequest request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  auto seq = std::make_unique<Sequence>();
  seq->num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  seq->tokens = std::move(request.prompt_token_ids);
  seq->priority = request.priority;
  seq->cache_salt = std::move(request.cache_salt);
  seq->request = std::move(request);
  seq->stream = std::make_shared<RequestStream>(options_.stream_capacity);
  seq->stream->SetOnRoom([waker = waker_] { waker->Wake(); });
  seq->arrival = clock_.Now();
  SubmittedRequest out;
  out.stream = seq->stream;
  std::optional<CachedResponse> cached;
  if (kv_tier_.response_cache_enabled() && IsResponseCacheable(seq->request)) {
    GenerateRequest keyed;  // the key reads the prompt and parameters; the prompt moved to tokens
    keyed.sampling = seq->request.sampling;
    keyed.cache_salt = seq->cache_salt;
    keyed.prompt_token_ids = seq->tokens;
    const kv::BlockManagerOptions& bm = block_manager_->options();
    kv::BlockHashRootKey ns{bm.model_id, bm.block_size, bm.kv_dtype, ""};
    ns.checkpoint_fingerprint = bm.checkpoint_fingerprint;
    ns.numerics = bm.numerics;
    seq->response_key = ResponseCacheKey(ns, options_.eos_token_ids, keyed);
    // On the caller's thread (a gRPC handler), bounded by the tier's deadline: no step waits.
    cached = kv_tier_.LookupResponse(*seq->response_key);
  }
  if (cached.has_value()) {
    {
      // Answered without a queue slot; an id still names it (Cancel ignores finished ids).
      absl::MutexLock lock(&mu_);
      if (!accepting_) return absl::UnavailableError("router is shutting down");
      seq->seq_id = SeqId(next_seq_id_++);
    }
    out.seq_id = seq->seq_id;
    if (AnswerFromResponseCache(*seq, *cached)) return out;
  }
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError("router is shutting down");
  if (num_queued_ >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("router queue is full (", num_queued_, " requests waiting); retry later"));
  }
  if (seq->seq_id.value() == 0) seq->seq_id = SeqId(next_seq_id_++);
  seq->seed = seq->request.sampling.seed.has_value() ? *seq->request.sampling.seed : seed_rng_();
  out.seq_id = seq->seq_id;
  ++num_queued_;
  has_work_ = true;
  wake_ = true;
  inbox_.push_back(std::move(seq));
  return out;
}

void Scheduler::Impl::Cancel(SeqId seq_id) {
  absl::MutexLock lock(&mu_);
  cancels_.insert(seq_id);
  wake_ = true;
}

void Scheduler::Impl::WakeLoop() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

absl::Status Scheduler::Impl::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || !accepting_) {
    return absl::FailedPreconditionError("scheduler already started or shut down");
  }
  started_ = true;
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Scheduler::Impl::Shutdown(absl::Time deadline) {
  bool started;
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
    accepting_ = false;
    drain_deadline_ = deadline;
    wake_ = true;
    started = started_;
  }
  if (started) {
    loop_.join();
  } else {
    AbortAll(absl::UnavailableError("router is shutting down"));
  }
}

int64_t Scheduler::Impl::AddStepListener(std::function<void()> fn) {
  absl::MutexLock lock(&listeners_mu_);
  const int64_t handle = next_listener_++;
  listeners_.emplace_back(handle, std::move(fn));
  return handle;
}

void Scheduler::Impl::RemoveStepListener(int64_t handle) {
  absl::MutexLock lock(&listeners_mu_);
  std::erase_if(listeners_, [handle](const auto& l) { return l.first == handle; });
}

void Scheduler::Impl::NotifyStepListeners() {
  absl::MutexLock lock(&listeners_mu_);
  for (const auto& [handle, fn] : listeners_) fn();
}

bool Scheduler::Impl::HasWork() const {
  absl::MutexLock lock(&mu_);
  return has_work_;
}

SchedulerStats Scheduler::Impl::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Scheduler::Impl::Loop() {
  bool tier_busy = false;  // what the kv tier was last told (KvTier::SetEngineBusy)
  for (;;) {
    const int64_t progress = Step();
    bool busy;
    {
      absl::MutexLock lock(&mu_);
      busy = has_work_;
    }
    if (busy != tier_busy) {
      kv_tier_.SetEngineBusy(busy);
      tier_busy = busy;
    }
    absl::MutexLock lock(&mu_);
    if (!accepting_ && (!has_work_ || clock_.Now() >= drain_deadline_)) break;
    if (progress > 0) continue;
    // Idle, or every request is held back: sleep until something changes or a deadline passes.
    absl::Time until =
        std::min(next_deadline_, accepting_ ? absl::InfiniteFuture() : drain_deadline_);
    absl::Duration timeout = until == absl::InfiniteFuture()
                                 ? absl::InfiniteDuration()
                                 : std::max(absl::ZeroDuration(), until - clock_.Now());
    mu_.AwaitWithTimeout(absl::Condition(&wake_), timeout);
    wake_ = false;
  }
  AbortAll(absl::UnavailableError("router is shutting down"));
}

void Scheduler::Impl::AbortAll(const absl::Status& status) {
  DrainInbox();
  for (auto& [id, seq] : sequences_) {
    if (!seq->finished) Finish(*seq, FinishReason::kAbort, status);
  }
  RemoveFinished();
  PublishStats(0, 0);
  NotifyStepListeners();
}

void Scheduler::Impl::DrainInbox() {
  absl::flat_hash_set<SeqId> cancels;
  {
    absl::MutexLock lock(&mu_);
    for (auto& seq : inbox_) {
      InsertInOrder(&queues_.waiting, seq.get());
      const SeqId id = seq->seq_id;
      sequences_.emplace(id, std::move(seq));
    }
    inbox_.clear();
    cancels.swap(cancels_);
  }
  for (SeqId id : cancels) {
    auto it = sequences_.find(id);
    if (it == sequences_.end() || it->second->finished) continue;
    Finish(*it->second, FinishReason::kAbort, absl::CancelledError("cancelled by the client"));
  }
}

void Scheduler::Impl::ExpireDeadlines(absl::Time now) {
  for (auto& [id, seq] : sequences_) {
    if (!seq->finished && seq->request.deadline <= now) {
      Finish(*seq, FinishReason::kAbort,
             absl::DeadlineExceededError("request deadline passed before it finished"));
    }
  }
}

void Scheduler::Impl::Finish(Sequence& seq, FinishReason reason, absl::Status status) {
  if (seq.finished) return;
  seq.finished = true;
  // No fetch thread may write into its pages once they are freed (and handed to others).
  if (seq.fetching) CancelFetch(seq);
  if (seq.running) {
    // Freeing never fails for a sequence the manager holds; a failure is a scheduler bug.
    const absl::Status freed = block_manager_->Free(seq.seq_id);
    MOE_DCHECK(freed.ok());
    (void)freed;
    seq.running = false;
  }
  Usage usage{.prompt_tokens = seq.num_prompt,
              .completion_tokens = seq.num_generated,
              .cached_prompt_tokens = seq.cached_prompt_tokens};
  if (seq.response_key.has_value() && status.ok() &&
      (reason == FinishReason::kStop || reason == FinishReason::kLength)) {
    StoreResponse(seq, reason);
  }
  seq.stream->Finish(reason, std::move(status), usage);
  ++num_finished_;
  finished_any_ = true;
  const absl::Time now = clock_.Now();
  metrics_.requests(reason).Increment();
  metrics_.e2e_seconds.Observe(absl::ToDoubleSeconds(now - seq.arrival));
  if (seq.num_generated >= 2) {
    metrics_.tpot_seconds.Observe(absl::ToDoubleSeconds(seq.last_token - seq.first_token) /
                                  static_cast<double>(seq.num_generated - 1));
  }
}

void Scheduler::Impl::RemoveFinished() {
  if (!finished_any_) return;
  finished_any_ = false;
  auto finished = [](SequenceState* s) { return Seq(s).finished; };
  std::erase_if(queues_.running, finished);
  std::erase_if(queues_.waiting, finished);
  absl::erase_if(sequences_, [](const auto& entry) { return entry.second->finished; });
}

int64_t Scheduler::Impl::Step() {
  DrainInbox();
  const absl::Time start = clock_.Now();
  ExpireDeadlines(start);
  PollFetches(start);
  RemoveFinished();
  auto has_room = [](const SequenceState& s) {
    return static_cast<const Sequence&>(s).stream->HasRoom();
  };
  StageContext ctx{.options = options_, .blocks = *block_manager_, .has_room = has_room};
  if (kv_tier_.enabled()) {
    ctx.on_preempt = [this](SequenceState& s) {
      Sequence& seq = Seq(&s);
      if (seq.fetching) CancelFetch(seq);  // before its pages are freed
      if (options_.preemption_mode == PreemptionMode::kOffload)
        StoreComputedBlocks(seq, /*all=*/true);
    };
  }
  PlanStep(ctx, &queues_, &plan_);
  ApplyPlan(start);
  const int64_t step_tokens = RunBatch();
  RemoveFinished();
  PublishStats(step_tokens, static_cast<int64_t>(chunks_.size()));
  NotifyStepListeners();
  return step_tokens;
}

void Scheduler::Impl::AddChunk(const PlannedChunk& chunk) {
  Sequence& seq = Seq(chunk.seq);
  if (chunk.num_tokens == 0 || seq.finished) return;
  StepChunk c;
  c.seq_id = seq.seq_id;
  c.token_ids = std::span<const int32_t>(seq.tokens.data() + chunk.start_pos,
                                         static_cast<size_t>(chunk.num_tokens));
  c.start_pos = static_cast<int32_t>(chunk.start_pos);
  c.want_logits = chunk.want_logits;
  chunks_.push_back(c);
  chunk_seqs_.push_back(&seq);
}

void Scheduler::Impl::ApplyPlan(absl::Time start) {
  num_preemptions_ += static_cast<int64_t>(plan_.preempted.size());
  for (PlanFailure& f : plan_.failed) {
    Finish(Seq(f.seq), FinishReason::kError, std::move(f.status));
  }
  FetchFromKvTier(start);
  for (const Admission& a : plan_.admissions) {
    Sequence& seq = Seq(a.seq);
    if (seq.admitted_once) continue;
    seq.admitted_once = true;
    seq.cached_prompt_tokens = a.num_cached_tokens;
    seq.sampler = std::make_unique<engine::SequenceSampler>(
        seq.request.sampling, absl::MakeConstSpan(seq.tokens.data(), seq.num_prompt), vocab_size_,
        seq.seed);
    if (seq.request.grammar != nullptr) {
      seq.matcher = std::make_unique<grammar::GrammarMatcher>(seq.request.grammar);
    }
    metrics_.queue_seconds.Observe(absl::ToDoubleSeconds(start - seq.arrival));
    metrics_.prompt_tokens_total.Increment(static_cast<double>(seq.num_prompt));
    metrics_.cached_prompt_tokens_total.Increment(static_cast<double>(a.num_cached_tokens));
  }
  for (const PlannedCopy& c : plan_.copies) {
    Sequence& seq = Seq(c.seq);
    if (seq.finished) continue;
    if (absl::Status s = runner_.CopyBlock(c.op.src_block_id, c.op.dst_block_id); !s.ok()) {
      Finish(seq, FinishReason::kError, std::move(s));  // RunBatch drops its chunk
    }
  }
}

int64_t Scheduler::Impl::RunBatch() {
  chunks_.clear();
  chunk_seqs_.clear();
  for (const PlannedChunk& c : plan_.decodes) AddChunk(c);
  for (const PlannedChunk& c : plan_.prefills) AddChunk(c);
  for (const Admission& a : plan_.admissions) AddChunk(a.chunk);
  if (chunks_.empty()) return 0;
  int64_t step_tokens = 0;
  for (const StepChunk& c : chunks_) step_tokens += static_cast<int64_t>(c.token_ids.size());

  // Block tables are final only now (appends and admissions may have moved them).
  for (size_t i = 0; i < chunks_.size(); ++i) {
    auto table = block_manager_->BlockTable(chunk_seqs_[i]->seq_id);
    MOE_DCHECK(table.ok());
    chunks_[i].block_table = std::span<const int32_t>(table->data(), table->size());
  }
  int64_t prefill_tokens = 0;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (chunk_seqs_[i]->num_computed < chunk_seqs_[i]->num_prompt) {
      prefill_tokens += static_cast<int64_t>(chunks_[i].token_ids.size());
    }
  }
  ++num_steps_;
  const absl::Time before = clock_.Now();
  const absl::Status status = runner_.Step(chunks_, &logits_);
  const absl::Time now = clock_.Now();
  if (status.ok() && prefill_tokens >= kMinPrefillTokensToEstimate && now > before) {
    // Whole-step throughput: decodes in the step make it an underestimate (a longer wait).
    const double rate = static_cast<double>(step_tokens) / absl::ToDoubleSeconds(now - before);
    prefill_tokens_per_s_ =
        prefill_tokens_per_s_ <= 0 ? rate : 0.7 * prefill_tokens_per_s_ + 0.3 * rate;
  }
  if (!status.ok()) {
    for (Sequence* seq : chunk_seqs_) Finish(*seq, FinishReason::kError, status);
  } else {
    size_t row = 0;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      Sequence& seq = *chunk_seqs_[i];
      if (absl::Status failed = runner_.ChunkStatus(i); !failed.ok()) {
        // Only this sequence hit an unavailable expert: end it, the others go on.
        if (chunks_[i].want_logits) ++row;
        Finish(seq, FinishReason::kError, std::move(failed));
        continue;
      }
      seq.num_computed += static_cast<int64_t>(chunks_[i].token_ids.size());
      absl::Status marked = block_manager_->MarkComputed(seq.seq_id, seq.num_computed);
      if (!marked.ok()) {
        Finish(seq, FinishReason::kError, std::move(marked));
        continue;
      }
      StoreComputedBlocks(seq);
      if (chunks_[i].want_logits) {
        ProcessLogits(seq, logits_.data() + row * vocab_size_, now);
        ++row;
      }
    }
  }
  return step_tokens;
}

void Scheduler::Impl::ProcessLogits(Sequence& seq, const float* logits, absl::Time now) {
  const generation::SamplingParams& params = seq.request.sampling;
  if (params.max_tokens == 0) {
    Finish(seq, FinishReason::kLength, absl::OkStatus());
    return;
  }
  engine::SampledToken sampled;
  if (seq.matcher != nullptr) {
    // The sequence's own grammar state decides the mask: batch invariance holds.
    const grammar::TokenBitmask& allowed = seq.matcher->NextMask();
    if (allowed.num_allowed == 0) {
      Finish(seq, FinishReason::kError,
             absl::InternalError("the constraint allows no token at this point"));
      return;
    }
    sampled = seq.sampler->Sample(absl::MakeConstSpan(logits, vocab_size_), allowed.words);
    // The sampled token is in the mask, so the matcher takes it.
    const absl::Status advanced = seq.matcher->Advance(sampled.token_id);
    MOE_DCHECK(advanced.ok());
    (void)advanced;
  } else {
    sampled = seq.sampler->Sample(absl::MakeConstSpan(logits, vocab_size_));
  }
  const int32_t token = sampled.token_id;
  seq.tokens.push_back(token);
  ++seq.num_generated;
  seq.stream->PushToken(token, params.logprobs >= 0 ? &sampled : nullptr);
  if (seq.response_key.has_value() && params.logprobs >= 0)
    seq.streamed_logprobs.push_back(sampled);
  if (seq.num_generated == 1) {
    seq.first_token = now;
    metrics_.ttft_seconds.Observe(absl::ToDoubleSeconds(now - seq.arrival));
  }
  seq.last_token = now;
  metrics_.generation_tokens_total.Increment();

  auto contains = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  const bool grammar_ended = seq.matcher != nullptr && seq.matcher->ended();
  if (grammar_ended || contains(params.stop_token_ids) ||
      (!params.ignore_eos && contains(options_.eos_token_ids))) {
    Finish(seq, FinishReason::kStop, absl::OkStatus());
  } else if (seq.num_generated >= params.max_tokens ||
             static_cast<int64_t>(seq.tokens.size()) >= max_context_) {
    Finish(seq, FinishReason::kLength, absl::OkStatus());
  } else if (seq.matcher != nullptr && seq.matcher->terminated()) {
    FinishCompleteGrammar(seq);
  }
}

void Scheduler::Impl::FetchFromKvTier(absl::Time now) {
  if (fetcher_ == nullptr || plan_.admissions.empty()) return;
  const int64_t bs = block_manager_->block_size();
  for (Admission& a : plan_.admissions) {
    Sequence& seq = Seq(a.seq);
    const int64_t have = a.num_cached_tokens / bs;
    seq.num_blocks_stored = std::max(seq.num_blocks_stored, have);
    if (seq.finished) continue;
    // Recompute means recompute: only first admissions (and offloaded sequences) fetch.
    if (seq.admitted_once && options_.preemption_mode != PreemptionMode::kOffload) continue;
    // Eligible as for L1: full blocks within the first len - 1 tokens (the last is computed).
    const int64_t eligible = (seq.num_tokens() - 1) / bs;
    if (eligible <= have || !FetchMayPay((eligible - have) * bs)) continue;
    std::vector<kv::BlockHash> chain = block_manager_->ChainHashes(
        absl::MakeConstSpan(seq.tokens.data(), static_cast<size_t>(eligible * bs)), seq.cache_salt);
    absl::StatusOr<absl::Span<const int32_t>> table = block_manager_->BlockTable(seq.seq_id);
    MOE_DCHECK(table.ok());
    const kv::BlockHash shard_key = chain[0];
    std::vector<kv::BlockHash> hashes(chain.begin() + have, chain.end());
    // The pages past the L1 hit: allocated to this sequence alone and not registered in the
    // prefix cache until EndFetch marks them computed, so the fetch thread is their only user.
    std::vector<int32_t> pages(table->begin() + have, table->begin() + eligible);
    const absl::Duration timeout = FetchTimeout((eligible - have) * bs);
    std::shared_ptr<KvFetcher::Job> job =
        fetcher_->Start(shard_key, std::move(hashes), std::move(pages), timeout, now,
                        now + timeout + kFetchGiveUpGrace);
    if (job == nullptr) continue;  // every fetch slot (or the byte budget) is taken: prefill
    seq.fetch = std::move(job);
    seq.fetching = true;
    seq.fetch_counts_as_cached = !seq.admitted_once;
    // It waits for the fetch instead of prefilling: its planned chunk gives its budget back.
    plan_.num_tokens -= a.chunk.num_tokens;
    a.chunk.num_tokens = 0;
  }
}

bool Scheduler::Impl::FetchMayPay(int64_t tokens) const {
  if (prefill_tokens_per_s_ <= 0) return true;
  const double prefill_s = static_cast<double>(tokens) / prefill_tokens_per_s_;
  return prefill_s >= absl::ToDoubleSeconds(options_.kv_fetch_min_saving);
}

absl::Duration Scheduler::Impl::FetchTimeout(int64_t tokens) const {
  const absl::Duration floor = kv_tier_.fetch_timeout();
  if (prefill_tokens_per_s_ <= 0) return floor;
  const absl::Duration prefill = absl::Seconds(static_cast<double>(tokens) / prefill_tokens_per_s_);
  return std::max(floor, std::min(kMaxFetchWait, kFetchWaitOverPrefill * prefill));
}

void Scheduler::Impl::PollFetches(absl::Time now) {
  if (fetcher_ == nullptr) return;
  for (SequenceState* s : queues_.running) {
    Sequence& seq = Seq(s);
    if (!seq.fetching || seq.finished) continue;
    KvFetcher::Job& job = *seq.fetch;
    if (!job.done()) {
      if (now < job.give_up_at()) continue;
      job.Cancel();  // the tier did not return in time: no later write touches the pages
      if (!job.done()) {
        EndFetch(seq, 0, 0, now);
        continue;
      }
    }
    EndFetch(seq, job.num_fetched(), job.num_from_l2(), now);
  }
}

void Scheduler::Impl::EndFetch(Sequence& seq, int64_t fetched, int64_t from_l2, absl::Time now) {
  const KvFetcher::Job& job = *seq.fetch;
  const int64_t asked = job.num_asked();
  metrics_.kv_fetch_seconds.Observe(absl::ToDoubleSeconds(now - job.started_at()));
  metrics_.prefix_cache_queries_total_l2.Increment(static_cast<double>(asked));
  metrics_.prefix_cache_hits_total_l2.Increment(static_cast<double>(from_l2));
  metrics_.prefix_cache_queries_total_l3.Increment(static_cast<double>(asked - from_l2));
  metrics_.prefix_cache_hits_total_l3.Increment(static_cast<double>(fetched - from_l2));
  seq.fetch.reset();
  seq.fetching = false;
  if (fetched <= 0) return;
  const int64_t bs = block_manager_->block_size();
  const int64_t computed = seq.num_computed + fetched * bs;
  if (absl::Status s = block_manager_->MarkComputed(seq.seq_id, computed); !s.ok()) {
    Finish(seq, FinishReason::kError, std::move(s));
    return;
  }
  seq.num_computed = computed;
  seq.num_blocks_stored = std::max(seq.num_blocks_stored, computed / bs);
  if (seq.fetch_counts_as_cached) {
    seq.cached_prompt_tokens += fetched * bs;
    metrics_.cached_prompt_tokens_total.Increment(static_cast<double>(fetched * bs));
  }
}

void Scheduler::Impl::CancelFetch(Sequence& seq) {
  seq.fetch->Cancel();
  seq.fetch.reset();
  seq.fetching = false;
}

void Scheduler::Impl::StoreComputedBlocks(Sequence& seq, bool all) {
  if (!kv_tier_.enabled()) return;
  const int64_t upto = all || options_.store_generated_blocks
                           ? seq.num_computed
                           : std::min(seq.num_computed, seq.num_prompt);
  const int64_t full = upto / block_manager_->block_size();
  if (full <= seq.num_blocks_stored) return;
  absl::StatusOr<absl::Span<const kv::BlockHash>> hashes =
      block_manager_->ComputedBlockHashes(seq.seq_id);
  absl::StatusOr<absl::Span<const int32_t>> table = block_manager_->BlockTable(seq.seq_id);
  if (!hashes.ok() || !table.ok() || static_cast<int64_t>(hashes->size()) < full) return;
  const size_t from = static_cast<size_t>(seq.num_blocks_stored);
  const absl::Span<const kv::BlockHash> fresh = hashes->subspan(from, full - from);
  const absl::Span<const int32_t> blocks = *table;
  const int64_t queued =
      kv_tier_.Store((*hashes)[0], std::span<const kv::BlockHash>(fresh.data(), fresh.size()),
                     [&](size_t i, std::span<uint8_t> dst) {
                       const absl::Status s = runner_.ReadKvBlock(blocks[from + i], dst);
                       MOE_DCHECK(s.ok());
                       (void)s;
                     });
  // Blocks that did not fit the queue are tried again after the next step.
  seq.num_blocks_stored += queued;
}

bool Scheduler::Impl::AnswerFromResponseCache(Sequence& seq, const CachedResponse& cached) {
  const generation::SamplingParams& params = seq.request.sampling;
  // A value that does not fit this request (a bug or a collision) is a miss.
  const bool fits = cached.prompt_tokens == seq.num_prompt && !cached.token_ids.empty() &&
                    cached.completion_tokens == static_cast<int64_t>(cached.token_ids.size()) &&
                    (cached.finish_reason == FinishReason::kStop ||
                     cached.finish_reason == FinishReason::kLength) &&
                    (params.logprobs < 0 || cached.logprobs.size() == cached.token_ids.size()) &&
                    std::all_of(cached.token_ids.begin(), cached.token_ids.end(),
                                [&](int32_t t) { return t >= 0 && t < vocab_size_; });
  if (!fits) return false;
  for (size_t i = 0; i < cached.token_ids.size(); ++i) {
    seq.stream->PushToken(cached.token_ids[i],
                          params.logprobs >= 0 ? &cached.logprobs[i] : nullptr);
  }
  const Usage usage{.prompt_tokens = seq.num_prompt,
                    .completion_tokens = cached.completion_tokens,
                    .cached_prompt_tokens = seq.num_prompt,
                    .from_response_cache = true};
  seq.stream->Finish(cached.finish_reason, absl::OkStatus(), usage);
  const double since = absl::ToDoubleSeconds(clock_.Now() - seq.arrival);
  metrics_.response_cache_hits_total.Increment();
  metrics_.requests(cached.finish_reason).Increment();
  metrics_.ttft_seconds.Observe(since);
  metrics_.e2e_seconds.Observe(since);
  metrics_.prompt_tokens_total.Increment(static_cast<double>(seq.num_prompt));
  metrics_.cached_prompt_tokens_total.Increment(static_cast<double>(seq.num_prompt));
  return true;
}

void Scheduler::Impl::StoreResponse(const Sequence& seq, FinishReason reason) {
  if (seq.num_generated == 0) return;  // prefill only: nothing to replay
  CachedResponse r;
  r.token_ids.assign(seq.tokens.begin() + seq.num_prompt, seq.tokens.end());
  r.logprobs = seq.streamed_logprobs;
  r.finish_reason = reason;
  r.prompt_tokens = seq.num_prompt;
  r.completion_tokens = seq.num_generated;
  kv_tier_.StoreResponse(*seq.response_key, r);
}

void Scheduler::Impl::FinishCompleteGrammar(Sequence& seq) {
  const std::vector<int32_t>& ends = seq.matcher->grammar().vocabulary().eos_ids();
  if (ends.empty()) {
    // No end token to write: the output is complete, but this model cannot say so.
    Finish(seq, FinishReason::kLength, absl::OkStatus());
    return;
  }
  if (seq.request.sampling.returns_logprobs()) return;  // the next step samples it, logprob too
  // Only an end token can follow: append it without an engine step (its KV is never needed).
  const int32_t end = ends.front();
  const absl::Status advanced = seq.matcher->Advance(end);
  MOE_DCHECK(advanced.ok());
  (void)advanced;
  seq.tokens.push_back(end);
  ++seq.num_generated;
  seq.stream->PushToken(end, nullptr);
  metrics_.generation_tokens_total.Increment();
  Finish(seq, FinishReason::kStop, absl::OkStatus());
}

void Scheduler::Impl::PublishStats(int64_t step_tokens, int64_t step_seqs) {
  const kv::BlockManagerStats kv_stats = block_manager_->GetStats();
  absl::Time next_deadline = absl::InfiniteFuture();
  int64_t num_fetching = 0;
  for (const auto& [id, seq] : sequences_) {
    next_deadline = std::min(next_deadline, seq->request.deadline);
    if (seq->fetching) {
      ++num_fetching;
      next_deadline = std::min(next_deadline, seq->fetch->give_up_at());
    }
  }
  const int64_t num_running = static_cast<int64_t>(queues_.running.size());
  const int64_t num_waiting = static_cast<int64_t>(queues_.waiting.size());
  metrics_.requests_running.Set(static_cast<double>(num_running));
  metrics_.requests_waiting.Set(static_cast<double>(num_waiting));
  metrics_.kv_usage_ratio_l1.Set(kv_stats.usage_ratio);
  if (metrics_.vllm_num_requests_waiting != nullptr) {
    metrics_.vllm_num_requests_waiting->Set(static_cast<double>(num_waiting));
    metrics_.vllm_kv_cache_usage_perc->Set(kv_stats.usage_ratio);
  }
  metrics_.prefix_cache_queries_total_l1.Increment(
      static_cast<double>(kv_stats.prefix_cache_queries - last_prefix_queries_));
  metrics_.prefix_cache_hits_total_l1.Increment(
      static_cast<double>(kv_stats.prefix_cache_hits - last_prefix_hits_));
  last_prefix_queries_ = kv_stats.prefix_cache_queries;
  last_prefix_hits_ = kv_stats.prefix_cache_hits;

  absl::MutexLock lock(&mu_);
  stats_.num_running = num_running;
  stats_.num_waiting = num_waiting + static_cast<int64_t>(inbox_.size());
  stats_.num_fetching = num_fetching;
  stats_.num_steps = num_steps_;
  stats_.num_preemptions = num_preemptions_;
  stats_.num_finished = num_finished_;
  stats_.last_step_tokens = step_tokens;
  stats_.last_step_seqs = step_seqs;
  stats_.kv = kv_stats;
  num_queued_ = stats_.num_waiting;
  has_work_ = !sequences_.empty() || !inbox_.empty();
  next_deadline_ = next_deadline;
}

}  // namespace moe::router
