// The router's end of one shared-memory region with an expert worker on the same host (no
// gRPC): RunExperts calls as records in the region's request ring, answers read from its
// response ring (common/shm/region.h, expert_wire.h). The activations are written once, into
// the request record; the outputs are read once, from the response record into the engine's
// buffers. RemoteExpertExecutor owns one per co-located worker and falls back to gRPC per call
// when TrySubmit says no.
//
// Answers come in request order. Await(call) reads every answer up to its call's, copying
// those of other submitted calls into their own outputs (they stay valid until their Await,
// the ExpertExecutor contract), so calls may be awaited in any order. A call given up at its
// deadline is abandoned: its late answer is read and dropped.
//
// Liveness: Await sleeps (after `spin`) on the response ring in slices of at most 10 ms and
// looks at the worker's PeerWord between them, so a worker killed mid-call is noticed within
// `peer_timeout` (UNAVAILABLE, broken() from then on) without the socket; a closed region
// (worker shut down) is noticed at once.
//
// Thread-safety: thread-compatible; the executor's step thread is its only user (the
// ExpertExecutor contract). broken() may be read from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/engine/expert_executor.h"
#include "common/shm/region.h"
#include "common/shm/ring.h"

namespace moe::shm {
class MappedRegion;
}  // namespace moe::shm

namespace moe::router {

// The router's shared-memory settings (router config `experts.shm`).
struct ShmChannelOptions {
  // How long the step thread spins for an answer before it sleeps (futex). Spinning pays only
  // where a core is idle; where router and workers share every core it takes the core the
  // worker computes on.
  absl::Duration spin = absl::ZeroDuration();
  // How long the worker's heartbeat may stand still before its calls fail (UNAVAILABLE) and it
  // is marked down: the bound on noticing a worker killed mid-call.
  absl::Duration peer_timeout = absl::Seconds(1);
  // This side's heartbeat period (one thread per router beats every region).
  absl::Duration heartbeat_interval = absl::Milliseconds(10);
  // Each step of the socket handshake.
  absl::Duration handshake_timeout = absl::Seconds(2);

  static void Describe(common::config::Schema<ShmChannelOptions>& s) {
    s.Add("spin", &ShmChannelOptions::spin, "spin before sleeping for an answer")
        .Range(absl::ZeroDuration(), absl::Milliseconds(10));
    s.Add("peer_timeout", &ShmChannelOptions::peer_timeout,
          "worker heartbeat silence before it is gone")
        .Range(absl::Milliseconds(10), absl::Minutes(10));
    s.Add("heartbeat_interval", &ShmChannelOptions::heartbeat_interval, "heartbeat period")
        .Range(absl::Milliseconds(1), absl::Seconds(10));
    s.Add("handshake_timeout", &ShmChannelOptions::handshake_timeout, "per handshake step")
        .Range(absl::Milliseconds(1), absl::Minutes(1));
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// Where one call's time went, on CLOCK_MONOTONIC (shared by the processes of a host): the
// router began writing the request (sent), the worker read it (picked) and began computing
// (compute_start; 0 when it computed nothing), the worker published the answer (published), the
// router read it (seen). For benchmarks: sent -> picked and published -> seen are the two
// hand-offs, wake-ups included.
struct ShmCallTimes {
  int64_t sent_mono_ns = 0;
  int64_t picked_mono_ns = 0;
  int64_t compute_start_mono_ns = 0;
  int64_t published_mono_ns = 0;
  int64_t seen_mono_ns = 0;
};

class ShmExpertChannel {
 public:
  // Connects to the worker's socket with its ticket (common/shm/handshake.h) and starts beating
  // this side's PeerWord on `heartbeat`. `heartbeat` and `clock` must outlive the channel.
  // Errors: the handshake's.
  static absl::StatusOr<std::unique_ptr<ShmExpertChannel>> Connect(const std::string& socket_path,
                                                                   absl::string_view ticket,
                                                                   const ShmChannelOptions& options,
                                                                   shm::Heartbeat& heartbeat,
                                                                   common::Clock& clock);
  // Closes the region (the worker sees it at once) and unmaps it. Outstanding calls are
  // abandoned: their outputs are never written after this.
  ~ShmExpertChannel();
  ShmExpertChannel(const ShmExpertChannel&) = delete;
  ShmExpertChannel& operator=(const ShmExpertChannel&) = delete;

  // Sends the batches `batch_idx` of `call` as call `call_id` (unique per channel) with the
  // worker-side deadline `deadline`. False when it cannot go now: the records would not fit
  // (larger than half a ring, or the ring is full), or broken(); nothing was sent then.
  bool TrySubmit(uint64_t call_id, const engine::ExpertCall& call,
                 absl::Span<const size_t> batch_idx, uint64_t placement_version,
                 absl::Time deadline);

  // Waits for call `call_id`'s answer until `deadline`, and returns the worker's status for it
  // (its outputs written when OK; `*compute` = the worker's compute time, `*times` (optional)
  // the call's timestamps). UNAVAILABLE when the worker closed the region, stopped beating or
  // broke the protocol (broken() then); DEADLINE_EXCEEDED (the call is abandoned); NOT_FOUND for
  // an unknown call.
  absl::Status Await(uint64_t call_id, absl::Time deadline, absl::Duration* compute,
                     ShmCallTimes* times = nullptr);

  bool broken() const { return broken_.load(std::memory_order_relaxed); }
  uint32_t ring_bytes() const;

 private:
  struct Call {
    uint64_t id = 0;
    int64_t hidden = 0;
    std::vector<float*> outputs;  // per batch, in request order
    std::vector<int64_t> rows;    // per batch
    uint64_t response_bytes = 0;  // payload
    bool answered = false;
    bool abandoned = false;
    absl::Status status;
    int64_t compute_ns = 0;
    ShmCallTimes times;
  };

  ShmExpertChannel(std::unique_ptr<shm::MappedRegion> region, const ShmChannelOptions& options,
                   shm::Heartbeat& heartbeat, common::Clock& clock);
  // Reads one answer into the oldest unanswered call. False on a protocol error.
  bool TakeAnswer(const shm::RingRecord& record);
  absl::Status Break(absl::string_view why);
  int64_t NowNs() const;

  const ShmChannelOptions options_;
  const std::unique_ptr<shm::MappedRegion> region_;
  shm::Heartbeat& heartbeat_;
  common::Clock& clock_;
  shm::RingProducer requests_;
  shm::RingConsumer responses_;
  shm::PeerMonitor worker_;
  std::deque<Call> calls_;                   // submitted, not yet awaited, in order
  uint64_t outstanding_response_bytes_ = 0;  // ring bytes of the unanswered calls' answers
  std::atomic<bool> broken_{false};
  std::string broken_why_;
};

}  // namespace moe::router
