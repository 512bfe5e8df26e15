#include "services/expert-worker/core/nccl_bootstrap.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace moe::expert_worker {

NcclBootstrap::NcclBootstrap(nccl::CommunicatorFactory& factory, NcclBootstrapOptions options)
    : factory_(factory), options_(options) {}

NcclBootstrap::~NcclBootstrap() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads = std::move(threads_);
  }
  for (std::thread& t : threads) t.join();
}

absl::StatusOr<NcclOffer> NcclBootstrap::Offer() {
  RETURN_IF_ERROR(factory_.Available());
  NcclOffer offer;
  {
    absl::MutexLock lock(&mu_);
    if (pending_ >= options_.max_pending_joins) {
      return absl::ResourceExhaustedError(
          absl::StrCat("nccl: ", pending_, " joins pending (max_pending_joins)"));
    }
    ++pending_;
  }
  absl::StatusOr<nccl::UniqueId> id = factory_.NewUniqueId();
  if (!id.ok()) {
    absl::MutexLock lock(&mu_);
    --pending_;
    return id.status();
  }
  offer.unique_id = *id;
  absl::MutexLock lock(&mu_);
  // Threads of finished joins are joined by the destructor; they are few (bounded by offers).
  threads_.emplace_back([this, offer] {
    absl::StatusOr<std::unique_ptr<nccl::Communicator>> c =
        factory_.Join(offer.unique_id, offer.num_ranks, offer.worker_rank, options_.join_timeout);
    absl::MutexLock lock(&mu_);
    --pending_;
    if (c.ok()) {
      joined_.push_back(std::move(*c));
      ++joined_total_;
    } else {
      ++failed_;
    }
  });
  return offer;
}

int NcclBootstrap::num_joined() const {
  absl::MutexLock lock(&mu_);
  return joined_total_;
}

int NcclBootstrap::num_failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void NcclBootstrap::WaitIdle() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](int* pending) { return *pending == 0; }, &pending_));
}

std::vector<std::unique_ptr<nccl::Communicator>> NcclBootstrap::TakeJoined() {
  absl::MutexLock lock(&mu_);
  return std::move(joined_);
}

}  // namespace moe::expert_worker
