// The router's scheduler: iteration-level continuous batching over the L1 paged KV cache.
//
// Each Step():
//   1. takes in new requests and cancellations, and ends requests past their deadline (their
//      blocks are freed at once);
//   2. plans the step (schedule_stages.h), both queues in (priority, arrival) order:
//      a. every running decode (one token each), preempting by recompute when the KV cache has
//         no block for one (the last in that order first: the lowest priority, latest arrival;
//         its blocks are freed and it goes back to the waiting queue, ahead of later arrivals
//         of its priority, with its tokens so far, to be re-prefilled);
//      b. running prefills, at most chunked_prefill_size tokens each, within the token budget
//         (max_batch_tokens);
//      c. waiting requests while max_num_seqs, the token budget and free KV blocks allow (a
//         prompt prefix already in the prefix cache is not recomputed: the count is reported as
//         usage.cached_prompt_tokens); never past a head that does not fit, and not in a step
//         that had to preempt;
//   3. runs the plan as one engine step, samples a token for every sequence that reached the
//      end of its tokens, streams it, and finishes requests on a stop token, max_tokens or the
//      context length.
// The kv tier below L1 (kv_tier.h, when enabled): an admitted prompt whose further prefix L1
// missed is fetched from it asynchronously (kv_fetcher.h): the sequence waits, "fetching", in
// the running queue with its pages reserved but not registered in the prefix cache, while a
// fetch thread writes the arriving blocks straight into those pages and every other sequence
// keeps being stepped. Each step polls the fetches; once one ends (complete, cut by its
// deadline, or failed) what arrived intact counts as computed (and as cached prompt tokens) and
// the rest is prefilled from that step on. Deadline policy: a fetch may take the tier's
// fetch_timeout(), or twice the estimated prefill time of the tokens it asks for (prefill
// throughput measured from the engine's steps) when that is longer, at most 10 s. Since only
// the fetching sequence waits, its deadline can be far longer than a step could afford; and
// a fetch slower than twice the prefill it saves would have been better prefilled (a miss then
// costs at most 3x the cold prefill, plus the floor). The tier returns by
// that deadline with what arrived; should it not, the step 500 ms later gives up on it (cancels
// it: nothing of it counts). A cancelled, expired or preempted fetching sequence cancels its
// fetch before its pages are freed, and a cancelled fetch writes nothing more (kv_fetcher.h).
// Fetches are bounded (kv_fetch_max_fetches, kv_fetch_max_bytes): beyond, the sequence prefills.
// Every full block the engine computes is stored in the tier asynchronously. With
// preemption_mode offload, a preempted sequence's blocks are stored before they are freed and
// fetched back at its re-admission. Deterministic requests (response_cache_key.h) are answered
// by Submit from the tier's response cache when it holds them, with no compute, and stored there
// when they finish with stop or length.
// A request whose consumer has stream_capacity unread tokens is not decoded until it reads.
//
// Output invariance: with a batch-invariant engine, a request's tokens do not depend on what it is
// batched with, on prefix-cache hits, on chunking or on preemption (tests check all four).
//
// Threading: one stepping thread (the loop started by Start(), or a test calling Step()
// directly) owns the BlockManager and the ModelRunner. Submit(), Cancel(), HasWork(),
// GetStats() and Shutdown() are thread-safe and never wait for a step to finish (Shutdown waits
// for the loop to end).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/ids.h"
#include "common/kv/block_manager.h"
#include "services/router/core/kv_tier.h"
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
  int64_t num_fetching = 0;      // running, waiting for their prefix from the kv tier
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
  // `runner`, `clock` and `metrics` are borrowed and must outlive the scheduler. The block
  // manager's pool must match the runner's KV cache (same block size, at most
  // runner.num_kv_blocks() blocks).
  // Errors: INVALID_ARGUMENT (bad options or mismatched pool).
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
      ModelRunner& runner, common::Clock& clock, RouterMetrics& metrics);
  // The same with a kv tier below L1 (borrowed; must outlive the scheduler). Its block size must
  // be the runner's (kv_block_bytes()) when it is enabled.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options, std::unique_ptr<kv::BlockManager> block_manager,
      ModelRunner& runner, KvTier& kv_tier, common::Clock& clock, RouterMetrics& metrics);
  // Aborts what is left and joins the loop (see Shutdown).
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a request (a response-cache hit comes back already finished; Submit then waits up
  // to the tier's deadline for the cache). Any thread. Errors: INVALID_ARGUMENT (empty prompt,
  // token id outside the vocabulary, bad sampling params, priority outside [-1000, 1000], prompt
  // (+1 token when max_tokens > 0) longer than the model context, prompt needing more KV blocks
  // than the whole cache), RESOURCE_EXHAUSTED (max_waiting requests already queued), UNAVAILABLE
  // (shutting down).
  absl::StatusOr<SubmittedRequest> Submit(GenerateRequest request);

  // Ends request `seq_id` with kAbort/CANCELLED at the start of the next step, freeing its KV
  // blocks. Unknown or finished ids are ignored. Wakes the loop. Any thread.
  void Cancel(common::SeqId seq_id);

  // Starts the loop thread: it steps while there is work and sleeps (no spinning) when idle or
  // when every running request is held back by its consumer. Any thread, once. Errors:
  // FAILED_PRECONDITION if already started or shut down.
  absl::Status Start();

  // Stops taking requests (Submit returns UNAVAILABLE), lets the loop finish what is queued and
  // running until `deadline` (the injected clock's time), then ends the rest with kAbort /
  // UNAVAILABLE, frees their blocks and joins the loop. Without a loop (never started) it ends
  // everything at once on the calling thread. Idempotent; any thread but the loop's.
  void Shutdown(absl::Time deadline);

  // Runs one iteration on the caller's thread (tests and benches drive the scheduler this way
  // instead of Start()). Returns the number of tokens the engine step computed (0: nothing ran).
  // REQUIRES: the loop is not started; one caller at a time.
  int64_t Step();

  // Runs `fn` on the stepping thread after every step (and after the shutdown's aborts), once
  // what the step produced is in the requests' streams: a consumer of many streams (the router's
  // GenerateBatch) looks once per step instead of waking per token. `fn` must be quick and must
  // not call back into the scheduler's listener methods. Returns the handle for
  // RemoveStepListener. Any thread.
  int64_t AddStepListener(std::function<void()> fn);
  // After it returns, the listener is not running and never runs again. Any thread but the
  // stepping one from inside a listener.
  void RemoveStepListener(int64_t handle);

  // True while any request is queued or running (as of the last step, plus later Submits).
  // Any thread.
  bool HasWork() const;
  // The snapshot of the last step. Any thread.
  SchedulerStats GetStats() const;

  // REQUIRES: the loop is not running (tests inspect the pool between Step() calls).
  const kv::BlockManager& block_manager() const;
  kv::BlockManager& mutable_block_manager();
  const SchedulerOptions& options() const;

 private:
  class Impl;  // queues, sequences, the loop thread and its mutex-guarded inbox (scheduler.cc)
  explicit Scheduler(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

}  // namespace moe::router
