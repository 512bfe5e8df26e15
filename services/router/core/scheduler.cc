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
#include "services/router/core/schedule_stages.h"
#include "services/router/core/sequence_state.h"
#include "services/router/core/step_plan.h"

namespace moe::router {

using common::SeqId;
using generation::FinishReason;
using generation::Usage;

class Scheduler::Impl {
 public:
  Impl(const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
       ModelRunner& runner, common::Clock& clock, RouterMetrics& metrics);
  ~Impl();

  absl::StatusOr<SubmittedRequest> Submit(GenerateRequest request) ABSL_LOCKS_EXCLUDED(mu_);
  void Cancel(SeqId seq_id) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);
  int64_t Step() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasWork() const ABSL_LOCKS_EXCLUDED(mu_);
  SchedulerStats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

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
  // A constrained sequence whose grammar is complete with nothing but an end token to follow:
  // appends the end token and finishes (kStop), or leaves it to the next step when the request
  // wants logprobs.
  void FinishCompleteGrammar(Sequence& seq);
  void RemoveFinished();
  void PublishStats(int64_t step_tokens, int64_t step_seqs) ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const SchedulerOptions options_;
  ModelRunner& runner_;
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
};

// ---------------------------------------------------------------------------------------------
// Scheduler: the contract of scheduler.h, forwarded.

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
    ModelRunner& runner, common::Clock& clock, RouterMetrics& metrics) {
  RETURN_IF_ERROR(options.Validate());
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
      std::make_unique<Impl>(options, std::move(block_manager), runner, clock, metrics)));
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
bool Scheduler::HasWork() const { return impl_->HasWork(); }
SchedulerStats Scheduler::GetStats() const { return impl_->GetStats(); }
const kv::BlockManager& Scheduler::block_manager() const { return impl_->block_manager(); }
kv::BlockManager& Scheduler::mutable_block_manager() { return impl_->block_manager(); }
const SchedulerOptions& Scheduler::options() const { return impl_->options(); }

// ---------------------------------------------------------------------------------------------
// Scheduler::Impl

Scheduler::Impl::Impl(const SchedulerOptions& options,
                      std::unique_ptr<kv::BlockManager> block_manager, ModelRunner& runner,
                      common::Clock& clock, RouterMetrics& metrics)
    : options_(options),
      runner_(runner),
      clock_(clock),
      metrics_(metrics),
      vocab_size_(runner.vocab_size()),
      max_context_(runner.max_context()),
      waker_(std::make_shared<Waker>()),
      block_manager_(std::move(block_manager)),
      seed_rng_(options.random_seed) {
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
    return absl::InvalidArgumentError(absl::StrCat(
        "the constraint was compiled for a vocabulary of ", request.grammar->vocabulary().size(),
        " tokens; the model has ", vocab_size_));
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
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError("router is shutting down");
  if (num_queued_ >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("router queue is full (", num_queued_, " requests waiting); retry later"));
  }
  seq->seq_id = SeqId(next_seq_id_++);
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

bool Scheduler::Impl::HasWork() const {
  absl::MutexLock lock(&mu_);
  return has_work_;
}

SchedulerStats Scheduler::Impl::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Scheduler::Impl::Loop() {
  for (;;) {
    const int64_t progress = Step();
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
  RemoveFinished();
  auto has_room = [](const SequenceState& s) {
    return static_cast<const Sequence&>(s).stream->HasRoom();
  };
  const StageContext ctx{.options = options_, .blocks = *block_manager_, .has_room = has_room};
  PlanStep(ctx, &queues_, &plan_);
  ApplyPlan(start);
  const int64_t step_tokens = RunBatch();
  RemoveFinished();
  PublishStats(step_tokens, static_cast<int64_t>(chunks_.size()));
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
  ++num_steps_;
  const absl::Status status = runner_.Step(chunks_, &logits_);
  const absl::Time now = clock_.Now();
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
  for (const auto& [id, seq] : sequences_) {
    next_deadline = std::min(next_deadline, seq->request.deadline);
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
