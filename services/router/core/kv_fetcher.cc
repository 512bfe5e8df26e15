#include "services/router/core/kv_fetcher.h"

#include <algorithm>
#include <utility>

#include "common/base/check.h"

namespace moe::router {

KvFetcher::Job::Job(ModelRunner& runner, kv::BlockHash shard_key, std::vector<kv::BlockHash> hashes,
                    std::vector<int32_t> blocks, absl::Duration timeout, absl::Time started_at,
                    absl::Time give_up_at, int64_t bytes)
    : runner_(runner),
      shard_key_(shard_key),
      hashes_(std::move(hashes)),
      blocks_(std::move(blocks)),
      timeout_(timeout),
      started_at_(started_at),
      give_up_at_(give_up_at),
      bytes_(bytes) {}

bool KvFetcher::Job::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

int64_t KvFetcher::Job::num_fetched() const {
  absl::MutexLock lock(&mu_);
  return num_fetched_;
}

int64_t KvFetcher::Job::num_from_l2() const {
  absl::MutexLock lock(&mu_);
  return num_from_l2_;
}

void KvFetcher::Job::Cancel() {
  absl::MutexLock lock(&mu_);  // waits for a write in progress
  cancelled_ = true;
}

void KvFetcher::Job::Write(size_t, size_t block, int64_t offset, std::span<const uint8_t> bytes) {
  absl::MutexLock lock(&mu_);
  if (cancelled_ || done_ || block >= blocks_.size()) return;
  // The tier checks sizes before writing; a failure here would be a bug in it.
  const absl::Status s = runner_.WriteKvBlock(blocks_[block], offset, bytes);
  MOE_DCHECK(s.ok());
  (void)s;
}

KvFetcher::KvFetcher(const Options& options, KvTier& tier, ModelRunner& runner,
                     std::function<void()> on_done)
    : options_(options), tier_(tier), runner_(runner), on_done_(std::move(on_done)) {
  for (int64_t i = 0; i < std::max<int64_t>(1, options_.num_threads); ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

KvFetcher::~KvFetcher() {
  std::deque<std::shared_ptr<Job>> dropped;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    dropped.swap(queue_);
  }
  for (auto& job : dropped) {
    absl::MutexLock lock(&job->mu_);
    job->done_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

std::shared_ptr<KvFetcher::Job> KvFetcher::Start(kv::BlockHash shard_key,
                                                 std::vector<kv::BlockHash> hashes,
                                                 std::vector<int32_t> blocks,
                                                 absl::Duration timeout, absl::Time now,
                                                 absl::Time give_up_at) {
  MOE_CHECK(hashes.size() == blocks.size());
  const int64_t block_bytes = std::max<int64_t>(1, tier_.block_bytes());
  int64_t n;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ || in_flight_ >= options_.max_fetches) return nullptr;
    n = std::min<int64_t>(static_cast<int64_t>(hashes.size()),
                          (options_.max_bytes - bytes_) / block_bytes);
    if (n <= 0) return nullptr;
    ++in_flight_;
    bytes_ += n * block_bytes;
  }
  hashes.resize(static_cast<size_t>(n));
  blocks.resize(static_cast<size_t>(n));
  std::shared_ptr<Job> job(new Job(runner_, shard_key, std::move(hashes), std::move(blocks),
                                   timeout, now, give_up_at, n * block_bytes));
  absl::MutexLock lock(&mu_);
  queue_.push_back(job);
  return job;
}

int64_t KvFetcher::num_in_flight() const {
  absl::MutexLock lock(&mu_);
  return in_flight_;
}

int64_t KvFetcher::bytes_in_flight() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

void KvFetcher::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !queue_.empty(); };
      mu_.Await(absl::Condition(&ready));
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    bool cancelled;
    {
      absl::MutexLock lock(&job->mu_);
      cancelled = job->cancelled_;
    }
    KvFetch fetch{.shard_key = job->shard_key_, .hashes = job->hashes_};
    if (!cancelled) tier_.Fetch(std::span<KvFetch>(&fetch, 1), *job, job->timeout_);
    {
      absl::MutexLock lock(&job->mu_);
      job->done_ = true;
      job->num_fetched_ =
          cancelled ? 0 : std::clamp<int64_t>(fetch.num_fetched, 0, job->num_asked());
      job->num_from_l2_ =
          cancelled ? 0 : std::clamp<int64_t>(fetch.num_from_l2, 0, job->num_fetched_);
    }
    {
      absl::MutexLock lock(&mu_);
      --in_flight_;
      bytes_ -= job->bytes_;
    }
    if (on_done_) on_done_();
  }
}

}  // namespace moe::router
