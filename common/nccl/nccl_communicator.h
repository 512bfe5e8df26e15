// The real CommunicatorFactory over NCCL (built only where NCCL is found: MOE_HAVE_NCCL).
// Plain header. Thread-safety: the factory is thread-safe (Join may run on a background thread
// while another thread calls NewUniqueId).
#pragma once

#include <memory>

#include "common/nccl/communicator.h"

namespace moe::nccl {

class NcclCommunicatorFactory final : public CommunicatorFactory {
 public:
  // `device`: the CUDA device the communicators use (cudaSetDevice on the joining thread).
  explicit NcclCommunicatorFactory(int device = 0) : device_(device) {}

  // CommunicatorFactory
  absl::Status Available() const override;
  absl::StatusOr<UniqueId> NewUniqueId() override;
  // Non-blocking init (ncclCommInitRankConfig, blocking = 0) polled until `timeout`, then
  // ncclCommAbort: a peer that never joins cannot hang the caller.
  absl::StatusOr<std::unique_ptr<Communicator>> Join(const UniqueId& id, int num_ranks, int rank,
                                                     absl::Duration timeout) override;

 private:
  const int device_;
};

// "2.28.9" of the NCCL library this process loaded.
std::string NcclVersionString();

}  // namespace moe::nccl
