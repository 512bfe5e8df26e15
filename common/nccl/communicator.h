// The NCCL data plane's seam (STYLE.md rule 2): a communicator between the GPUs of a router and
// its expert workers, and the factory that creates unique ids and joins them. The real one is
// NcclCommunicatorFactory (nccl_communicator.h, built only where NCCL is found); tests use
// testing/fake_communicator.h. Plain header: no NCCL or CUDA header.
//
// Bootstrap (DESIGN.md §2, expert_worker.proto NegotiateTransport): a router that accepts
// TRANSPORT_KIND_NCCL asks a worker; a worker with NCCL enabled creates a unique id, answers it
// in NcclTransport (num_ranks 2, itself rank 1) and joins in the background; the router joins as
// rank 0 with the same id. Both joins block until every rank has joined.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

struct CUstream_st;

namespace moe::nccl {

// ncclUniqueId: 128 opaque bytes (NCCL_UNIQUE_ID_BYTES), carried verbatim on the wire.
inline constexpr size_t kUniqueIdBytes = 128;
using UniqueId = std::array<uint8_t, kUniqueIdBytes>;

// The wire form (proto `bytes`) and back. Errors: InvalidArgument unless exactly 128 bytes.
std::string UniqueIdToBytes(const UniqueId& id);
absl::StatusOr<UniqueId> UniqueIdFromBytes(std::string_view bytes);

// One transfer of a grouped step: `bytes` of device memory to or from rank `peer`.
struct Transfer {
  int peer = 0;
  void* device_buffer = nullptr;  // send: read; recv: written
  size_t bytes = 0;
};

// A joined communicator. Thread-compatible: one caller at a time (the router's scheduler
// thread, the worker's compute slot).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int num_ranks() const = 0;
  // All sends and receives of one step as one group (ncclGroupStart .. ncclGroupEnd) on
  // `stream`: activations to the workers, their expert rows back. Enqueued, not synchronised.
  // Errors: InvalidArgument (peer out of range), Internal (NCCL's error, named).
  virtual absl::Status GroupedSendRecv(absl::Span<const Transfer> sends,
                                       absl::Span<const Transfer> recvs, CUstream_st* stream) = 0;
};

class CommunicatorFactory {
 public:
  virtual ~CommunicatorFactory() = default;
  // OK when this process can join a communicator (NCCL built in, a device present);
  // FailedPrecondition saying why not.
  virtual absl::Status Available() const = 0;
  // A fresh unique id (ncclGetUniqueId; opens the bootstrap listener). Needs no device.
  virtual absl::StatusOr<UniqueId> NewUniqueId() = 0;
  // Joins communicator `id` as `rank` of `num_ranks`; blocks until every rank has joined or
  // `timeout` passes (then the half-made communicator is aborted). Errors: InvalidArgument (rank
  // outside [0, num_ranks)), FailedPrecondition (Available()'s), DeadlineExceeded, Internal
  // (NCCL's, named).
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Join(const UniqueId& id, int num_ranks,
                                                             int rank, absl::Duration timeout) = 0;
};

}  // namespace moe::nccl
