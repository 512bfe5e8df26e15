#include "common/nccl/testing/fake_communicator.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace moe::nccl::testing {
namespace {

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(int rank, int num_ranks) : rank_(rank), num_ranks_(num_ranks) {}
  int rank() const override { return rank_; }
  int num_ranks() const override { return num_ranks_; }
  absl::Status GroupedSendRecv(absl::Span<const Transfer> sends, absl::Span<const Transfer> recvs,
                               CUstream_st*) override {
    for (const Transfer& t : sends) {
      if (t.peer < 0 || t.peer >= num_ranks_) return absl::InvalidArgumentError("send: bad peer");
    }
    for (const Transfer& t : recvs) {
      if (t.peer < 0 || t.peer >= num_ranks_) return absl::InvalidArgumentError("recv: bad peer");
    }
    return absl::OkStatus();
  }

 private:
  const int rank_, num_ranks_;
};

std::string Key(const UniqueId& id) { return UniqueIdToBytes(id); }

}  // namespace

absl::StatusOr<UniqueId> FakeCommunicatorFactory::NewUniqueId() {
  absl::MutexLock lock(&mu_);
  UniqueId id{};
  const uint64_t n = next_id_++;
  std::memcpy(id.data(), &n, sizeof(n));
  id[kUniqueIdBytes - 1] = 0xfa;  // never all zeros
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> FakeCommunicatorFactory::Join(
    const UniqueId& id, int num_ranks, int rank, absl::Duration timeout) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
    return absl::InvalidArgumentError(absl::StrCat("join: rank ", rank, " of ", num_ranks));
  }
  if (!available_.ok()) return available_;
  absl::MutexLock lock(&mu_);
  Rendezvous& r = rendezvous_[Key(id)];
  if (r.num_ranks == 0) r.num_ranks = num_ranks;
  if (r.num_ranks != num_ranks) return absl::InvalidArgumentError("join: num_ranks differs");
  ++r.joined;
  auto all_joined = [&r] { return r.joined >= r.num_ranks; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all_joined), timeout)) {
    return absl::DeadlineExceededError("join: not every rank joined");
  }
  return std::unique_ptr<Communicator>(new FakeCommunicator(rank, num_ranks));
}

int FakeCommunicatorFactory::joined(const UniqueId& id) const {
  absl::MutexLock lock(&mu_);
  auto it = rendezvous_.find(Key(id));
  return it == rendezvous_.end() ? 0 : it->second.joined;
}

}  // namespace moe::nccl::testing
