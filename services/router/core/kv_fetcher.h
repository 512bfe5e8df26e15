// Runs the scheduler's kv-tier fetches off its stepping thread (scheduler.h): each admitted
// sequence whose further prefix L1 missed gets one KvFetcher::Job, run by one of a few fetch
// threads through KvTier::Fetch, whose blocks are written straight into that sequence's own L1
// pages (ModelRunner::WriteKvBlock: the tier's one copy, none added here). Meanwhile the stepping
// thread keeps stepping every other sequence; it polls the job each step and, once it is done,
// counts the fetched blocks as computed and prefills the rest.
//
// Bounded: at most max_fetches jobs queued or running, and at most max_bytes of blocks asked for
// by them together (a job that does not fit is trimmed to what does, or refused: the sequence
// then prefills). The queue is FIFO; fetch threads never wait for the stepping thread.
//
// Thread-safety (the reason this class exists as its own unit): ModelRunner::WriteKvBlock runs on
// a fetch thread while the stepping thread runs engine steps. That is safe only because a job
// writes nothing but its own pages, which nobody else reads or writes until the job is done or
// cancelled: they were allocated to the sequence, are not registered in the prefix cache (no
// other sequence can share them) and the sequence is in no engine step while it fetches. Every
// write holds the job's mutex and checks `cancelled` first, so once Cancel() returns no write is
// in progress or can start: only then may the scheduler free (and so reuse) the pages.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/kv/block_hash.h"
#include "services/router/core/kv_tier.h"
#include "services/router/core/model_runner.h"

namespace moe::router {

class KvFetcher {
 public:
  struct Options {
    int64_t num_threads = 4;   // Fetch calls running at once
    int64_t max_fetches = 16;  // jobs queued or running
    int64_t max_bytes = 512ll << 20;
  };

  // One sequence's fetch. Start() hands it out; the stepping thread polls and may cancel it.
  class Job final : public KvBlockWriter {
   public:
    // Whether the tier's Fetch returned (complete, cut by its deadline, or failed). Once true,
    // num_fetched()/num_from_l2() are final and no write happens again.
    bool done() const ABSL_LOCKS_EXCLUDED(mu_);
    // Leading blocks written and verified, and of those how many came from L2. REQUIRES: done().
    int64_t num_fetched() const ABSL_LOCKS_EXCLUDED(mu_);
    int64_t num_from_l2() const ABSL_LOCKS_EXCLUDED(mu_);
    // Blocks asked for (after trimming to the byte budget).
    int64_t num_asked() const { return static_cast<int64_t>(hashes_.size()); }
    // When the stepping thread gives up on it (its per-sequence deadline plus a grace the tier
    // gets to return on its own). Constant.
    absl::Time give_up_at() const { return give_up_at_; }
    absl::Time started_at() const { return started_at_; }
    // Stops every later write; returns once none is in progress. The pages may be freed after.
    // The tier's Fetch may still run to its own deadline (its thread stays busy until then).
    void Cancel() ABSL_LOCKS_EXCLUDED(mu_);

    // KvBlockWriter (the fetch thread).
    void Write(size_t fetch, size_t block, int64_t offset, std::span<const uint8_t> bytes) override
        ABSL_LOCKS_EXCLUDED(mu_);

   private:
    friend class KvFetcher;
    Job(ModelRunner& runner, kv::BlockHash shard_key, std::vector<kv::BlockHash> hashes,
        std::vector<int32_t> blocks, absl::Duration timeout, absl::Time started_at,
        absl::Time give_up_at, int64_t bytes);

    ModelRunner& runner_;
    const kv::BlockHash shard_key_;
    const std::vector<kv::BlockHash> hashes_;  // chain order
    const std::vector<int32_t> blocks_;        // the L1 page of each hash
    const absl::Duration timeout_;
    const absl::Time started_at_;
    const absl::Time give_up_at_;
    const int64_t bytes_;
    mutable absl::Mutex mu_;
    bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
    bool done_ ABSL_GUARDED_BY(mu_) = false;
    int64_t num_fetched_ ABSL_GUARDED_BY(mu_) = 0;
    int64_t num_from_l2_ ABSL_GUARDED_BY(mu_) = 0;
  };

  // `tier` and `runner` are borrowed and must outlive the fetcher. `on_done` runs on a fetch
  // thread after each job ends (the scheduler wakes its loop); it must not call back in.
  KvFetcher(const Options& options, KvTier& tier, ModelRunner& runner,
            std::function<void()> on_done);
  // Drops queued jobs (they end with nothing fetched) and joins the threads, which waits for the
  // running Fetch calls (each returns by its timeout).
  ~KvFetcher();
  KvFetcher(const KvFetcher&) = delete;
  KvFetcher& operator=(const KvFetcher&) = delete;

  // Queues the fetch of `hashes` (chain order; hashes[0]'s parent is the last block L1 had)
  // into pages `blocks` (parallel), for at most `timeout`; give_up_at is when the stepping
  // thread stops waiting. Trims the hashes to the byte budget left; nullptr when nothing fits
  // (max_fetches jobs, or the byte budget, already taken) or when asked for no block.
  // REQUIRES: the pages are the caller's alone until the job is done or cancelled.
  std::shared_ptr<Job> Start(kv::BlockHash shard_key, std::vector<kv::BlockHash> hashes,
                             std::vector<int32_t> blocks, absl::Duration timeout, absl::Time now,
                             absl::Time give_up_at) ABSL_LOCKS_EXCLUDED(mu_);

  // Jobs queued or running, and the bytes they asked for (for tests and stats).
  int64_t num_in_flight() const ABSL_LOCKS_EXCLUDED(mu_);
  int64_t bytes_in_flight() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WorkerLoop();

  const Options options_;
  KvTier& tier_;
  ModelRunner& runner_;
  const std::function<void()> on_done_;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace moe::router
