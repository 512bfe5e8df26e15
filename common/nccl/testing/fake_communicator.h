// An in-memory CommunicatorFactory for tests: ids are distinct counters, Join is a rendezvous
// of every rank of one id inside this process (each rank on its own thread), and the joined
// communicators copy host memory between peers in GroupedSendRecv. Thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "absl/synchronization/mutex.h"
#include "common/nccl/communicator.h"

namespace moe::nccl::testing {

class FakeCommunicatorFactory final : public CommunicatorFactory {
 public:
  // `available`: what Available() answers (a machine without a GPU: FailedPrecondition).
  explicit FakeCommunicatorFactory(absl::Status available = absl::OkStatus())
      : available_(std::move(available)) {}

  absl::Status Available() const override { return available_; }
  absl::StatusOr<UniqueId> NewUniqueId() override;
  absl::StatusOr<std::unique_ptr<Communicator>> Join(const UniqueId& id, int num_ranks, int rank,
                                                     absl::Duration timeout) override;
  // Ranks that have joined `id` so far.
  int joined(const UniqueId& id) const;

 private:
  struct Rendezvous {
    int num_ranks = 0;
    int joined = 0;
  };
  const absl::Status available_;
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, Rendezvous> rendezvous_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::nccl::testing
