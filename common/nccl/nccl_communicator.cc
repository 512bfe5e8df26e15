#include "common/nccl/nccl_communicator.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/kernels/cuda/cuda_kernels.h"

namespace moe::nccl {
namespace {

static_assert(sizeof(ncclUniqueId) == kUniqueIdBytes, "the wire form is ncclUniqueId's bytes");

absl::Status FromNccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", ncclGetErrorString(r)));
}

#define NCCL_RETURN_IF_ERROR(expr)                                 \
  do {                                                             \
    const absl::Status moe_nccl_status_ = FromNccl((expr), #expr); \
    if (!moe_nccl_status_.ok()) return moe_nccl_status_;           \
  } while (0)

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int num_ranks)
      : comm_(comm), rank_(rank), num_ranks_(num_ranks) {}
  ~NcclCommunicator() override { (void)ncclCommDestroy(comm_); }
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int num_ranks() const override { return num_ranks_; }

  absl::Status GroupedSendRecv(absl::Span<const Transfer> sends, absl::Span<const Transfer> recvs,
                               CUstream_st* stream) override {
    for (const Transfer& t : sends) {
      if (t.peer < 0 || t.peer >= num_ranks_) return absl::InvalidArgumentError("send: bad peer");
    }
    for (const Transfer& t : recvs) {
      if (t.peer < 0 || t.peer >= num_ranks_) return absl::InvalidArgumentError("recv: bad peer");
    }
    NCCL_RETURN_IF_ERROR(ncclGroupStart());
    absl::Status status;
    for (const Transfer& t : sends) {
      if (status.ok()) {
        status = FromNccl(ncclSend(t.device_buffer, t.bytes, ncclUint8, t.peer, comm_, stream),
                          "ncclSend");
      }
    }
    for (const Transfer& t : recvs) {
      if (status.ok()) {
        status = FromNccl(ncclRecv(t.device_buffer, t.bytes, ncclUint8, t.peer, comm_, stream),
                          "ncclRecv");
      }
    }
    // The group is always closed, even after an error inside it.
    const absl::Status end = FromNccl(ncclGroupEnd(), "ncclGroupEnd");
    return status.ok() ? end : status;
  }

 private:
  const ncclComm_t comm_;
  const int rank_;
  const int num_ranks_;
};

}  // namespace

absl::Status NcclCommunicatorFactory::Available() const {
  std::string why;
  if (kernels::cuda::DeviceCount(&why) <= device_) {
    return absl::FailedPreconditionError(
        absl::StrCat("nccl: no CUDA device ", device_, " (", why, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<UniqueId> NcclCommunicatorFactory::NewUniqueId() {
  ncclUniqueId raw;
  NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&raw));
  UniqueId id;
  std::memcpy(id.data(), &raw, kUniqueIdBytes);
  return id;
}

absl::StatusOr<std::unique_ptr<Communicator>> NcclCommunicatorFactory::Join(
    const UniqueId& id, int num_ranks, int rank, absl::Duration timeout) {
  if (num_ranks < 1 || rank < 0 || rank >= num_ranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("nccl join: rank ", rank, " outside [0, ", num_ranks, ")"));
  }
  if (absl::Status s = Available(); !s.ok()) return s;
  if (cudaSetDevice(device_) != cudaSuccess) {
    return absl::InternalError(absl::StrCat("nccl join: cudaSetDevice(", device_, ") failed"));
  }
  ncclUniqueId raw;
  std::memcpy(&raw, id.data(), kUniqueIdBytes);
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  const ncclResult_t init = ncclCommInitRankConfig(&comm, num_ranks, raw, rank, &config);
  if (init != ncclSuccess && init != ncclInProgress)
    return FromNccl(init, "ncclCommInitRankConfig");
  const absl::Time deadline = absl::Now() + timeout;
  ncclResult_t state = ncclInProgress;
  while (true) {
    const ncclResult_t query = ncclCommGetAsyncError(comm, &state);
    if (query != ncclSuccess) {
      (void)ncclCommAbort(comm);
      return FromNccl(query, "ncclCommGetAsyncError");
    }
    if (state != ncclInProgress) break;
    if (absl::Now() >= deadline) {
      (void)ncclCommAbort(comm);
      return absl::DeadlineExceededError(absl::StrCat("nccl join: not every one of ", num_ranks,
                                                      " ranks joined within ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(1));  // the bootstrap runs on NCCL's own threads
  }
  if (state != ncclSuccess) {
    (void)ncclCommAbort(comm);
    return FromNccl(state, "ncclCommInitRankConfig (async)");
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, rank, num_ranks));
}

std::string NcclVersionString() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace moe::nccl
