// The worker's half of the NCCL bootstrap (no gRPC, no NCCL header): issue an offer (a fresh
// unique id; the worker is rank 1 of 2, the caller rank 0) and join that communicator on a
// background thread, so that NegotiateTransport answers at once and the caller's join meets the
// worker's. Joined communicators wait in `joined` for the data plane that uses them.
//
// Thread-safety: every method is thread-safe. Offers beyond `max_pending_joins` answer
// ResourceExhausted (every queue is bounded); a join that the caller never meets ends after
// `join_timeout`. The destructor waits for the pending joins (at most join_timeout).
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/nccl/communicator.h"

namespace moe::expert_worker {

struct NcclBootstrapOptions {
  int max_pending_joins = 4;                        // offers whose join has not finished
  absl::Duration join_timeout = absl::Seconds(30);  // a caller that never joins
};

struct NcclOffer {
  nccl::UniqueId unique_id;
  int num_ranks = 2;
  int worker_rank = 1;
  int caller_rank = 0;
};

class NcclBootstrap {
 public:
  // `factory` is borrowed and must outlive the bootstrap.
  NcclBootstrap(nccl::CommunicatorFactory& factory, NcclBootstrapOptions options = {});
  ~NcclBootstrap();
  NcclBootstrap(const NcclBootstrap&) = delete;
  NcclBootstrap& operator=(const NcclBootstrap&) = delete;

  // A new offer, its join started. Errors: FailedPrecondition (factory.Available(): no device,
  // no NCCL), ResourceExhausted (too many pending joins), the factory's id error.
  absl::StatusOr<NcclOffer> Offer();

  // Joins finished so far: communicators ready for the data plane, and failures.
  int num_joined() const;
  int num_failed() const;
  // Blocks until no join is pending (each ends by joining or by its timeout).
  void WaitIdle();
  // Hands the joined communicators over (oldest first).
  std::vector<std::unique_ptr<nccl::Communicator>> TakeJoined();

 private:
  nccl::CommunicatorFactory& factory_;
  const NcclBootstrapOptions options_;
  mutable absl::Mutex mu_;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_ ABSL_GUARDED_BY(mu_) = 0;
  int joined_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::unique_ptr<nccl::Communicator>> joined_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::expert_worker
