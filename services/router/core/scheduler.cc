#include "services/router/core/scheduler.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "common/base/status_macros.h"

namespace moe::router {

using common::SeqId;

struct Scheduler::Sequence {
  SeqId id;
  GenerateRequest request;  // prompt_token_ids moved into `tokens`
  std::shared_ptr<RequestStream> stream;
  std::vector<int32_t> tokens;  // prompt, then generated
  int64_t num_prompt = 0;
  int64_t num_generated = 0;
  // While running: tokens with a KV slot, and tokens whose KV is written (mirrors the block
  // manager, which the scheduler keeps in step).
  int64_t num_slots = 0;
  int64_t num_computed = 0;
  bool running = false;
  bool finished = false;
  bool admitted_once = false;
  int64_t cached_prompt_tokens = 0;
  int64_t scheduled_step = -1;  // the step that last included it
  uint64_t seed = 0;
  std::unique_ptr<engine::SequenceSampler> sampler;  // made at first admission
  absl::Time arrival;
  absl::Time first_token = absl::InfinitePast();
  absl::Time last_token = absl::InfinitePast();
};

namespace {
// Scheduling order: priority, then arrival (seq ids grow with arrival).
template <typename S>
bool Before(const S* a, const S* b) {
  if (a->request.priority != b->request.priority) return a->request.priority < b->request.priority;
  return a->id < b->id;
}
}  // namespace

// Lets a RequestStream (which may outlive the scheduler) wake the loop safely.
struct Scheduler::Waker {
  absl::Mutex mu;
  Scheduler* scheduler ABSL_GUARDED_BY(mu) = nullptr;
  void Wake() {
    absl::MutexLock lock(&mu);
    if (scheduler != nullptr) scheduler->WakeLoop();
  }
};

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
    ModelRunner* runner, common::Clock* clock, RouterMetrics* metrics) {
  RETURN_IF_ERROR(options.Validate());
  if (block_manager == nullptr || runner == nullptr || clock == nullptr) {
    return absl::InvalidArgumentError("scheduler: block manager, runner and clock are required");
  }
  if (block_manager->block_size() != runner->kv_block_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: block manager block size ", block_manager->block_size(),
                     " != KV cache block size ", runner->kv_block_size()));
  }
  if (block_manager->num_blocks() > runner->num_kv_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("scheduler: block manager has ", block_manager->num_blocks(),
                     " blocks, the KV cache only ", runner->num_kv_blocks()));
  }
  return std::unique_ptr<Scheduler>(
      new Scheduler(options, std::move(block_manager), runner, clock, metrics));
}

Scheduler::Scheduler(const SchedulerOptions& options,
                     std::unique_ptr<kv::BlockManager> block_manager, ModelRunner* runner,
                     common::Clock* clock, RouterMetrics* metrics)
    : options_(options),
      runner_(runner),
      clock_(clock),
      metrics_(metrics),
      vocab_size_(runner->vocab_size()),
      max_context_(runner->max_context()),
      waker_(std::make_shared<Waker>()),
      block_manager_(std::move(block_manager)),
      seed_rng_(options.random_seed) {
  absl::MutexLock lock(&waker_->mu);
  waker_->scheduler = this;
}

Scheduler::~Scheduler() {
  Shutdown(absl::InfinitePast());
  absl::MutexLock lock(&waker_->mu);
  waker_->scheduler = nullptr;
}

absl::Status Scheduler::ValidateRequest(const GenerateRequest& request) const {
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

absl::StatusOr<SubmittedRequest> Scheduler::Submit(GenerateRequest request) {
  RETURN_IF_ERROR(ValidateRequest(request));
  auto seq = std::make_unique<Sequence>();
  seq->num_prompt = static_cast<int64_t>(request.prompt_token_ids.size());
  seq->tokens = std::move(request.prompt_token_ids);
  seq->request = std::move(request);
  seq->stream = std::make_shared<RequestStream>(options_.stream_capacity);
  seq->stream->SetOnRoom([waker = waker_] { waker->Wake(); });
  seq->arrival = clock_->Now();
  SubmittedRequest out;
  out.stream = seq->stream;
  absl::MutexLock lock(&mu_);
  if (!accepting_) return absl::UnavailableError("router is shutting down");
  if (num_queued_ >= options_.max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("router queue is full (", num_queued_, " requests waiting); retry later"));
  }
  seq->id = SeqId(next_seq_id_++);
  seq->seed = seq->request.sampling.seed.has_value() ? *seq->request.sampling.seed : seed_rng_();
  out.seq_id = seq->id;
  ++num_queued_;
  has_work_ = true;
  wake_ = true;
  inbox_.push_back(std::move(seq));
  return out;
}

void Scheduler::Cancel(SeqId seq_id) {
  absl::MutexLock lock(&mu_);
  cancels_.insert(seq_id);
  wake_ = true;
}

void Scheduler::WakeLoop() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

absl::Status Scheduler::Start() {
  absl::MutexLock lock(&mu_);
  if (started_ || !accepting_) {
    return absl::FailedPreconditionError("scheduler already started or shut down");
  }
  started_ = true;
  loop_ = std::thread([this] { Loop(); });
  return absl::OkStatus();
}

void Scheduler::Shutdown(absl::Time deadline) {
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

bool Scheduler::HasWork() const {
  absl::MutexLock lock(&mu_);
  return has_work_;
}

SchedulerStats Scheduler::GetStats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void Scheduler::Loop() {
  for (;;) {
    const int64_t progress = Step();
    absl::MutexLock lock(&mu_);
    if (!accepting_ && (!has_work_ || clock_->Now() >= drain_deadline_)) break;
    if (progress > 0) continue;
    // Idle, or every request is held back: sleep until something changes or a deadline passes.
    absl::Time until =
        std::min(next_deadline_, accepting_ ? absl::InfiniteFuture() : drain_deadline_);
    absl::Duration timeout = until == absl::InfiniteFuture()
                                 ? absl::InfiniteDuration()
                                 : std::max(absl::ZeroDuration(), until - clock_->Now());
    mu_.AwaitWithTimeout(absl::Condition(&wake_), timeout);
    wake_ = false;
  }
  AbortAll(absl::UnavailableError("router is shutting down"));
}

void Scheduler::AbortAll(const absl::Status& status) {
  DrainInbox();
  for (auto& [id, seq] : sequences_) {
    if (!seq->finished) Finish(*seq, FinishReason::kAbort, status);
  }
  RemoveFinished();
  PublishStats(0, 0);
}

void Scheduler::DrainInbox() {
  absl::flat_hash_set<SeqId> cancels;
  {
    absl::MutexLock lock(&mu_);
    for (auto& seq : inbox_) {
      waiting_.insert(
          std::upper_bound(waiting_.begin(), waiting_.end(), seq.get(), Before<Sequence>),
          seq.get());
      const SeqId id = seq->id;
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

void Scheduler::ExpireDeadlines(absl::Time now) {
  for (auto& [id, seq] : sequences_) {
    if (!seq->finished && seq->request.deadline <= now) {
      Finish(*seq, FinishReason::kAbort,
             absl::DeadlineExceededError("request deadline passed before it finished"));
    }
  }
}

void Scheduler::Finish(Sequence& seq, FinishReason reason, absl::Status status) {
  if (seq.finished) return;
  seq.finished = true;
  if (seq.running) {
    // Freeing never fails for a sequence the manager holds; a failure is a scheduler bug.
    const absl::Status freed = block_manager_->Free(seq.id);
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
  if (metrics_ != nullptr) {
    const absl::Time now = clock_->Now();
    metrics_->requests(reason).Increment();
    metrics_->e2e_seconds.Observe(absl::ToDoubleSeconds(now - seq.arrival));
    if (seq.num_generated >= 2) {
      metrics_->tpot_seconds.Observe(absl::ToDoubleSeconds(seq.last_token - seq.first_token) /
                                     static_cast<double>(seq.num_generated - 1));
    }
  }
}

void Scheduler::Preempt(Sequence& seq) {
  MOE_DCHECK(seq.running && !running_.empty() && running_.back() == &seq);
  const absl::Status freed = block_manager_->Free(seq.id);
  MOE_DCHECK(freed.ok());
  (void)freed;
  seq.running = false;
  seq.num_slots = 0;
  seq.num_computed = 0;
  running_.pop_back();
  // Ahead of every later arrival of its priority: it goes back to the front.
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), &seq, Before<Sequence>), &seq);
  ++num_preemptions_;
}

void Scheduler::RemoveFinished() {
  if (!finished_any_) return;
  finished_any_ = false;
  std::erase_if(running_, [](const Sequence* s) { return s->finished; });
  std::erase_if(waiting_, [](const Sequence* s) { return s->finished; });
  absl::erase_if(sequences_, [](const auto& entry) { return entry.second->finished; });
}

void Scheduler::AddChunk(Sequence& seq, int64_t n) {
  const int64_t start = seq.num_computed;
  StepChunk chunk;
  chunk.seq_id = seq.id;
  chunk.token_ids = std::span<const int32_t>(seq.tokens.data() + start, n);
  chunk.start_pos = static_cast<int32_t>(start);
  chunk.want_logits = start + n == static_cast<int64_t>(seq.tokens.size());
  chunks_.push_back(chunk);
  chunk_seqs_.push_back(&seq);
  seq.scheduled_step = num_steps_;
}

int64_t Scheduler::Step() {
  DrainInbox();
  const absl::Time start = clock_->Now();
  ExpireDeadlines(start);
  RemoveFinished();

  chunks_.clear();
  chunk_seqs_.clear();
  int64_t budget = options_.max_batch_tokens;
  bool preempted = false;

  // 1. Decodes, oldest first. A decode needs a slot for its newest token; when none is left,
  //    the latest arrival that is not yet scheduled gives its blocks back (itself last).
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    const bool is_decode = seq.num_slots < static_cast<int64_t>(seq.tokens.size());
    if (!is_decode || !seq.stream->HasRoom()) {
      ++i;
      continue;
    }
    bool self_preempted = false;
    for (;;) {
      auto need = block_manager_->NumBlocksForAppend(seq.id, 1);
      if (!need.ok() || *need <= block_manager_->NumAvailableBlocks()) break;
      if (running_.size() == 1) break;  // nothing else to take from: AppendTokens fails below
      Sequence& victim = *running_.back();
      Preempt(victim);
      preempted = true;
      if (&victim == &seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // it was the last running sequence left unscheduled
    absl::StatusOr<std::vector<kv::CopyOp>> copies =
        block_manager_->AppendTokens(seq.id, absl::MakeConstSpan(&seq.tokens.back(), 1));
    absl::Status status = copies.status();
    if (status.ok()) {
      for (const kv::CopyOp& op : *copies) {
        status = runner_->CopyBlock(op.src_block_id, op.dst_block_id);
        if (!status.ok()) break;
      }
    }
    if (!status.ok()) {
      if (absl::IsResourceExhausted(status)) {
        status = absl::ResourceExhaustedError(
            absl::StrCat("sequence of ", seq.tokens.size(), " tokens outgrew the whole KV cache"));
      }
      Finish(seq, FinishReason::kError, std::move(status));
      running_.erase(running_.begin() + i);
      continue;
    }
    ++seq.num_slots;
    AddChunk(seq, 1);
    --budget;
    ++i;
  }

  // 2. Prefills already running, oldest first, a chunk each.
  for (Sequence* seq : running_) {
    if (budget <= 0) break;
    if (seq->scheduled_step == num_steps_ ||
        seq->num_slots < static_cast<int64_t>(seq->tokens.size())) {
      continue;
    }
    const int64_t remaining = static_cast<int64_t>(seq->tokens.size()) - seq->num_computed;
    const int64_t n = std::min({remaining, options_.chunked_prefill_size, budget});
    if (n <= 0) continue;
    if (seq->num_computed + n == static_cast<int64_t>(seq->tokens.size()) &&
        !seq->stream->HasRoom()) {
      continue;
    }
    AddChunk(*seq, n);
    budget -= n;
  }

  // 3. Admissions, first come first served; a head that does not fit blocks the queue. Not in a
  //    step that had to preempt (the cache is already short).
  const int64_t bs = block_manager_->block_size();
  while (!preempted && budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    Sequence& seq = *waiting_.front();
    const int64_t len = static_cast<int64_t>(seq.tokens.size());
    if (!running_.empty()) {
      // Keep a block of headroom per running sequence so admitting does not force the next
      // decode step to preempt what was just admitted.
      const int64_t matched = block_manager_->MatchPrefix(seq.tokens, seq.request.cache_salt);
      const int64_t need = (len + bs - 1) / bs - matched / bs;
      if (need + static_cast<int64_t>(running_.size()) > block_manager_->NumAvailableBlocks()) {
        break;
      }
    }
    absl::StatusOr<int64_t> cached =
        block_manager_->Allocate(seq.id, seq.tokens, seq.request.cache_salt);
    if (absl::IsResourceExhausted(cached.status())) break;
    waiting_.pop_front();
    if (!cached.ok()) {
      Finish(seq, FinishReason::kError, cached.status());
      continue;
    }
    seq.running = true;
    seq.num_slots = len;
    seq.num_computed = *cached;
    running_.insert(
        std::upper_bound(running_.begin(), running_.end(), &seq,
                         [](const Sequence* a, const Sequence* b) { return a->id < b->id; }),
        &seq);
    if (!seq.admitted_once) {
      seq.admitted_once = true;
      seq.cached_prompt_tokens = *cached;
      seq.sampler = std::make_unique<engine::SequenceSampler>(
          seq.request.sampling, absl::MakeConstSpan(seq.tokens.data(), seq.num_prompt), vocab_size_,
          seq.seed);
      if (metrics_ != nullptr) {
        metrics_->queue_seconds.Observe(absl::ToDoubleSeconds(start - seq.arrival));
        metrics_->prompt_tokens_total.Increment(static_cast<double>(seq.num_prompt));
        metrics_->cached_prompt_tokens_total.Increment(static_cast<double>(*cached));
      }
    }
    const int64_t n = std::min({len - seq.num_computed, options_.chunked_prefill_size, budget});
    if (seq.num_computed + n == len && !seq.stream->HasRoom()) continue;
    AddChunk(seq, n);
    budget -= n;
  }

  const int64_t step_tokens = options_.max_batch_tokens - budget;
  const int64_t step_seqs = static_cast<int64_t>(chunks_.size());
  if (chunks_.empty()) {
    RemoveFinished();
    PublishStats(0, 0);
    return 0;
  }

  // Block tables are final only now (appends and admissions above may have moved them).
  for (size_t i = 0; i < chunks_.size(); ++i) {
    auto table = block_manager_->BlockTable(chunk_seqs_[i]->id);
    MOE_DCHECK(table.ok());
    chunks_[i].block_table = std::span<const int32_t>(table->data(), table->size());
  }
  ++num_steps_;
  const absl::Status status = runner_->Step(chunks_, &logits_);
  const absl::Time now = clock_->Now();
  if (!status.ok()) {
    for (Sequence* seq : chunk_seqs_) Finish(*seq, FinishReason::kError, status);
  } else {
    size_t row = 0;
    for (size_t i = 0; i < chunks_.size(); ++i) {
      Sequence& seq = *chunk_seqs_[i];
      if (absl::Status failed = runner_->ChunkStatus(i); !failed.ok()) {
        // Only this sequence hit an unavailable expert: end it, the others go on.
        if (chunks_[i].want_logits) ++row;
        Finish(seq, FinishReason::kError, std::move(failed));
        continue;
      }
      seq.num_computed += static_cast<int64_t>(chunks_[i].token_ids.size());
      absl::Status marked = block_manager_->MarkComputed(seq.id, seq.num_computed);
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
  RemoveFinished();
  PublishStats(step_tokens, step_seqs);
  return step_tokens;
}

void Scheduler::ProcessLogits(Sequence& seq, const float* logits, absl::Time now) {
  const engine::SamplingParams& params = seq.request.sampling;
  if (params.max_tokens == 0) {
    Finish(seq, FinishReason::kLength, absl::OkStatus());
    return;
  }
  const engine::SampledToken sampled =
      seq.sampler->Sample(absl::MakeConstSpan(logits, vocab_size_));
  const int32_t token = sampled.token_id;
  seq.tokens.push_back(token);
  ++seq.num_generated;
  seq.stream->PushToken(token, params.logprobs >= 0 ? &sampled : nullptr);
  if (seq.num_generated == 1) {
    seq.first_token = now;
    if (metrics_ != nullptr)
      metrics_->ttft_seconds.Observe(absl::ToDoubleSeconds(now - seq.arrival));
  }
  seq.last_token = now;
  if (metrics_ != nullptr) metrics_->generation_tokens_total.Increment();

  auto contains = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  if (contains(params.stop_token_ids) || (!params.ignore_eos && contains(options_.eos_token_ids))) {
    Finish(seq, FinishReason::kStop, absl::OkStatus());
  } else if (seq.num_generated >= params.max_tokens ||
             static_cast<int64_t>(seq.tokens.size()) >= max_context_) {
    Finish(seq, FinishReason::kLength, absl::OkStatus());
  }
}

void Scheduler::PublishStats(int64_t step_tokens, int64_t step_seqs) {
  const kv::BlockManagerStats kv_stats = block_manager_->GetStats();
  absl::Time next_deadline = absl::InfiniteFuture();
  for (const auto& [id, seq] : sequences_) {
    next_deadline = std::min(next_deadline, seq->request.deadline);
  }
  const int64_t num_running = static_cast<int64_t>(running_.size());
  const int64_t num_waiting = static_cast<int64_t>(waiting_.size());
  if (metrics_ != nullptr) {
    metrics_->requests_running.Set(static_cast<double>(num_running));
    metrics_->requests_waiting.Set(static_cast<double>(num_waiting));
    metrics_->kv_usage_ratio_l1.Set(kv_stats.usage_ratio);
    if (metrics_->vllm_num_requests_waiting != nullptr) {
      metrics_->vllm_num_requests_waiting->Set(static_cast<double>(num_waiting));
      metrics_->vllm_kv_cache_usage_perc->Set(kv_stats.usage_ratio);
    }
    metrics_->prefix_cache_queries_total_l1.Increment(
        static_cast<double>(kv_stats.prefix_cache_queries - last_prefix_queries_));
    metrics_->prefix_cache_hits_total_l1.Increment(
        static_cast<double>(kv_stats.prefix_cache_hits - last_prefix_hits_));
  }
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
