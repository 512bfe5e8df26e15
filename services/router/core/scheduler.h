// The router's scheduler: iteration-level continuous batching over the L1 paged KV cache.
//
// Each Step():
//   1. takes in new requests and cancellations, and ends requests past their deadline (their
//      blocks are freed at once);
//   2. schedules every running decode (one token each) in (priority, arrival) order, preempting
//      by recompute when the KV cache has no block for one (the last in that order first: its
//      blocks are freed and it goes back to the front of the waiting queue with its tokens so far,
//      to be re-prefilled);
//   3. continues running prefills, at most chunked_prefill_size tokens each, within the token
//      budget (max_batch_tokens);
//   4. admits waiting requests in (priority, arrival) order while max_num_seqs, the token budget
//   and
//      free KV blocks allow (a prompt prefix already in the prefix cache is not recomputed: the
//      count is reported as usage.cached_prompt_tokens); never admits past a head that does not
//      fit;
//   5. runs the whole mix as one engine step, samples a token for every sequence that reached the
//      end of its tokens, streams it, and finishes requests on a stop token, max_tokens or the
//      context length.
// A request whose consumer has stream_capacity unread tokens is not decoded until it reads.
//
// Output invariance: with a batch-invariant engine, a request's tokens do not depend on what it is
// batched with, on prefix-cache hits, on chunking or on preemption (tests check all four).
//
// Threading: one thread (the loop started by Start(), or a test calling Step() directly) owns the
// BlockManager and the ModelRunner. Submit(), Cancel(), GetStats() and Shutdown() are thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/ids.h"
#include "common/kv/block_manager.h"
#include "services/router/core/model_runner.h"
#include "services/router/core/request.h"
#include "services/router/core/request_stream.h"
#include "services/router/core/router_metrics.h"
#include "services/router/core/scheduler_options.h"

namespace moe::router {

// A snapshot published after every step. Plain data.
struct SchedulerStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  int64_t num_steps = 0;         // engine steps run
  int64_t num_preemptions = 0;   // cumulative
  int64_t num_finished = 0;      // cumulative, any reason
  int64_t last_step_tokens = 0;  // tokens in the last engine step
  int64_t last_step_seqs = 0;    // sequences in the last engine step
  kv::BlockManagerStats kv;      // as of the end of the last step
};

// What Submit() hands back: the request's id (for Cancel) and its token stream.
struct SubmittedRequest {
  common::SeqId seq_id;
  std::shared_ptr<RequestStream> stream;
};

class Scheduler {
 public:
  // `runner`, `clock` and `metrics` are borrowed and must outlive the scheduler; `metrics` may be
  // null (no metrics). The block manager's pool must match the runner's KV cache (same block
  // size, at most runner->num_kv_blocks() blocks).
  // Errors: INVALID_ARGUMENT (bad options or mismatched pool).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
      ModelRunner* runner, common::Clock* clock, RouterMetrics* metrics);
  // Aborts what is left and joins the loop (see Shutdown).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request. Errors: INVALID_ARGUMENT (empty prompt, token id outside the vocabulary,
  // bad sampling params, prompt (+1 token when max_tokens > 0) longer than the model context,
  // prompt needing more KV blocks than the whole cache), RESOURCE_EXHAUSTED (max_waiting requests
  // already queued), UNAVAILABLE (shutting down).
  absl::StatusOr<SubmittedRequest> Submit(GenerateRequest request);

  // Ends request `seq_id` with kAbort/CANCELLED at the start of the next step, freeing its KV
  // blocks. Unknown or finished ids are ignored. Wakes the loop.
  void Cancel(common::SeqId seq_id);

  // Starts the loop thread: it steps while there is work and sleeps (no spinning) when idle or
  // when every running request is held back by its consumer. Errors: FAILED_PRECONDITION if
  // already started.
  absl::Status Start();

  // Stops taking requests (Submit returns UNAVAILABLE), lets the loop finish what is queued and
  // running until `deadline` (the injected clock's time), then ends the rest with kAbort /
  // UNAVAILABLE, frees their blocks and joins the loop. Idempotent.
  void Shutdown(absl::Time deadline);

  // Runs one iteration on the caller's thread (tests and benches drive the scheduler this way
  // instead of Start()). Returns the number of tokens the engine step computed (0: nothing ran).
  // REQUIRES: the loop is not started.
  int64_t Step();

  // True while any request is queued or running.
  bool HasWork() const;
  SchedulerStats GetStats() const;

  // REQUIRES: the loop is not running (tests inspect the pool between Step() calls).
  const kv::BlockManager& block_manager() const { return *block_manager_; }
  kv::BlockManager& mutable_block_manager() { return *block_manager_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Sequence;
  struct Waker;

  Scheduler(const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
            ModelRunner* runner, common::Clock* clock, RouterMetrics* metrics);

  absl::Status ValidateRequest(const GenerateRequest& request) const;
  void Loop();
  void WakeLoop();
  // Takes new requests from the inbox and ends cancelled ones.
  void DrainInbox();
  void ExpireDeadlines(absl::Time now);
  // Ends every request with kAbort / `status` (shutdown).
  void AbortAll(const absl::Status& status);
  // Ends `seq` (running or waiting): frees its blocks, closes its stream, records metrics. The
  // caller (or the next RemoveFinished) drops it from running_/waiting_.
  void Finish(Sequence& seq, generation::FinishReason reason, absl::Status status);
  // Frees `seq`'s blocks and puts it back at the front of the waiting queue.
  // REQUIRES: seq is running_.back().
  void Preempt(Sequence& seq);
  // Adds the next `n` uncomputed tokens of `seq` to this step.
  void AddChunk(Sequence& seq, int64_t n);
  // Samples the next token of `seq` from `logits` [vocab] and handles stop / length.
  void ProcessLogits(Sequence& seq, const float* logits, absl::Time now);
  void RemoveFinished();
  void PublishStats(int64_t step_tokens, int64_t step_seqs);

  // Constant after construction.
  const SchedulerOptions options_;
  ModelRunner* const runner_;
  common::Clock* const clock_;
  RouterMetrics* const metrics_;
  const int64_t vocab_size_;
  const int64_t max_context_;
  const std::shared_ptr<Waker> waker_;

  // Owned by the stepping thread (the loop, or the caller of Step()).
  std::unique_ptr<kv::BlockManager> block_manager_;
  absl::flat_hash_map<common::SeqId, std::unique_ptr<Sequence>> sequences_;
  std::vector<Sequence*> running_;  // ascending (priority, seq id); seq ids grow with arrival
  std::deque<Sequence*> waiting_;   // ascending (priority, seq id): a preempted one goes first
  bool finished_any_ = false;       // RemoveFinished has work
  int64_t last_prefix_queries_ = 0;
  int64_t last_prefix_hits_ = 0;
  int64_t num_preemptions_ = 0;
  int64_t num_finished_ = 0;
  int64_t num_steps_ = 0;
  std::vector<StepChunk> chunks_;
  std::vector<Sequence*> chunk_seqs_;
  std::vector<float> logits_;
  std::thread loop_;

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Sequence>> inbox_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<common::SeqId> cancels_ ABSL_GUARDED_BY(mu_);
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

}  // namespace moe::router
