// The expert worker's shared-memory data plane (no gRPC): RunExperts for routers on the same
// host through one region per router (common/shm/region.h), requests and responses as records
// in the region's two rings (common/shm/expert_wire.h), the activations read and the outputs
// written in place.
//
// Setup. The gRPC control plane (ExpertWorkerServer::NegotiateTransport) authorises a caller
// and asks IssueTicket() for a single-use ticket, which it returns with socket_path(); the
// router connects to that Unix socket with the ticket, and the handshake (common/shm/
// handshake.h) checks the ticket and SO_PEERCRED (the peer's uid must be this process's
// effective uid or one of `allowed_uids`) before it creates the region. No ticket, no region:
// shared memory never bypasses the control plane's checks.
//
// Serving. Each region has one thread that waits for the router's next request (a bounded
// spin, then a futex sleep) and computes it itself through the ExpertCallHandler (the core's
// slots and bounded queue: RESOURCE_EXHAUSTED when full), writing the outputs straight into
// the response record, then publishes it and wakes the router. Requests whose deadline passed
// before they were read are answered DEADLINE_EXCEEDED without computing. A request is
// released only after its response is published.
//
// Liveness. A Heartbeat thread beats this side's PeerWord of every region. A serving thread
// whose router closed the region or stopped beating for `peer_timeout` (killed), or broke the
// ring protocol, closes the region (its state word, then the mapping) and exits: a crashed
// router never leaves a worker spinning or holding memory. ~ShmServer closes every region, so
// routers see kPeerClosed at once and go back to gRPC.
//
// Thread-safety: IssueTicket, regions() and socket_path() are thread-safe (gRPC threads call
// them). The handler is called from the serving threads, several at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/engine/expert_executor.h"
#include "common/metrics/registry.h"

namespace moe::shm {
class Heartbeat;
class MappedRegion;
class UnixListener;
}  // namespace moe::shm

namespace moe::expert_worker {

class ExpertWorkerCore;

struct ShmServerOptions {
  // Serve routers on this host over shared memory (they fall back to gRPC without it).
  bool enabled = true;
  // Where the Unix socket goes: a directory every co-located router can reach (/dev/shm; in a
  // pod, the emptyDir the router and its sidecar workers share). The path must stay under
  // 108 bytes. The regions themselves are memfds (not files here).
  std::string dir = "/dev/shm";
  // Each ring's data, bytes (a power of two; a region is 4 KiB + 2x this). Calls whose records
  // do not fit in half a ring go over gRPC. Pages are touched only as far as calls reach.
  int64_t ring_bytes = int64_t{16} << 20;
  // Regions (routers) served at once.
  int32_t max_regions = 16;
  // How long a serving thread spins for the next request before it sleeps (futex). Spinning
  // only pays where a core is idle; where router and workers share every core, a spinning
  // waiter takes the core a peer needs.
  absl::Duration spin = absl::Microseconds(0);
  // This side's heartbeat period, and how long a router's heartbeat may stand still before
  // its region is dropped.
  absl::Duration heartbeat_interval = absl::Milliseconds(10);
  absl::Duration peer_timeout = absl::Seconds(1);
  // How long an issued ticket stays valid; how long each handshake step may take.
  absl::Duration ticket_ttl = absl::Seconds(10);
  absl::Duration handshake_timeout = absl::Seconds(2);
  // Peer uids admitted besides this process's effective uid.
  std::vector<int64_t> allowed_uids;

  static void Describe(common::config::Schema<ShmServerOptions>& s) {
    s.Add("enabled", &ShmServerOptions::enabled, "serve co-located routers over shared memory");
    s.Add("dir", &ShmServerOptions::dir, "directory of the Unix socket (shared with routers)")
        .NonEmpty();
    s.Add("ring_bytes", &ShmServerOptions::ring_bytes, "bytes per ring (power of two)")
        .Range(int64_t{1} << 12, int64_t{1} << 31);
    s.Add("max_regions", &ShmServerOptions::max_regions, "routers served at once").Range(1, 1024);
    s.Add("spin", &ShmServerOptions::spin, "spin before sleeping for a request")
        .Range(absl::ZeroDuration(), absl::Milliseconds(10));
    s.Add("heartbeat_interval", &ShmServerOptions::heartbeat_interval, "heartbeat period")
        .Range(absl::Milliseconds(1), absl::Seconds(10));
    s.Add("peer_timeout", &ShmServerOptions::peer_timeout, "silence before a router is gone")
        .Range(absl::Milliseconds(10), absl::Minutes(10));
    s.Add("ticket_ttl", &ShmServerOptions::ticket_ttl, "validity of an issued ticket")
        .Range(absl::Milliseconds(10), absl::Minutes(10));
    s.Add("handshake_timeout", &ShmServerOptions::handshake_timeout, "per handshake step")
        .Range(absl::Milliseconds(1), absl::Minutes(1));
    s.Add("allowed_uids", &ShmServerOptions::allowed_uids, "peer uids admitted besides ours");
  }
  absl::Status Validate() const;
};

// What a region's serving thread calls to compute one request (the worker core, or a fake).
class ExpertCallHandler {
 public:
  virtual ~ExpertCallHandler() = default;
  // The model's hidden size (requests of another size are refused before Run).
  virtual int64_t hidden() const = 0;
  // Computes `call`, its outputs written in place; `compute` gets the time spent computing.
  // Errors as ExpertWorkerCore::Run (and INVALID_ARGUMENT for another activations mode).
  virtual absl::Status Run(const engine::ExpertCall& call, absl::Duration* compute) = 0;
};

// The worker core as a handler: the activations-mode check of the gRPC path, then Run().
class CoreCallHandler final : public ExpertCallHandler {
 public:
  explicit CoreCallHandler(ExpertWorkerCore& core) : core_(core) {}
  int64_t hidden() const override;
  absl::Status Run(const engine::ExpertCall& call, absl::Duration* compute) override;

 private:
  ExpertWorkerCore& core_;
};

struct ShmServerMetrics {
  explicit ShmServerMetrics(common::metrics::Registry& r);
  common::metrics::Gauge& regions;  // moe_expert_worker_shm_regions
  common::metrics::Counter& calls;  // moe_expert_worker_shm_calls_total
  common::metrics::Family<common::metrics::Counter>& handshakes;  // ..._shm_handshakes_total
  common::metrics::Counter& peers_lost;  // moe_expert_worker_shm_peers_lost_total
};

class ShmServer {
 public:
  struct Offer {
    std::string socket_path;
    std::string ticket;  // shm::kTicketBytes, single use
    uint32_t ring_bytes = 0;
  };

  // Listens on a fresh socket in options.dir and starts the accept and heartbeat threads.
  // `handler`, `registry` and `clock` are borrowed and must outlive the server.
  // Errors: INVALID_ARGUMENT (options), UNAVAILABLE (the socket).
  static absl::StatusOr<std::unique_ptr<ShmServer>> Start(const ShmServerOptions& options,
                                                          ExpertCallHandler& handler,
                                                          common::metrics::Registry& registry,
                                                          common::Clock& clock);
  // Closes every region (routers see it closed), joins every thread, removes the socket.
  ~ShmServer();
  ShmServer(const ShmServer&) = delete;
  ShmServer& operator=(const ShmServer&) = delete;

  // A ticket for one region, for a caller the control plane has authorised.
  // RESOURCE_EXHAUSTED when max_regions regions (and tickets) are open.
  absl::StatusOr<Offer> IssueTicket();
  int32_t regions() const;
  const std::string& socket_path() const;

 private:
  struct Region;
  ShmServer(const ShmServerOptions& options, ExpertCallHandler& handler,
            common::metrics::Registry& registry, common::Clock& clock);
  void AcceptLoop();
  // Admits a handshake's ticket and peer (single use; uid checked).
  absl::Status Admit(absl::string_view ticket, uid_t uid);
  void Serve(Region* region);
  // Joins and drops regions whose thread has finished.
  void Reap() ABSL_LOCKS_EXCLUDED(mu_);

  const ShmServerOptions options_;
  ExpertCallHandler& handler_;
  common::Clock& clock_;
  ShmServerMetrics metrics_;
  std::unique_ptr<shm::UnixListener> listener_;
  std::unique_ptr<shm::Heartbeat> heartbeat_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, absl::Time> tickets_ ABSL_GUARDED_BY(mu_);  // -> expiry
  std::vector<std::unique_ptr<Region>> regions_ ABSL_GUARDED_BY(mu_);
  std::thread accept_thread_;
};

}  // namespace moe::expert_worker
