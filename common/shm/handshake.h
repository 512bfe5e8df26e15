// Setting up one region (region.h) between an expert worker and a router on the same host: the
// worker listens on a Unix socket (in a directory both can reach: /dev/shm, or a pod's shared
// emptyDir); the router, holding a single-use ticket that the worker issued over the gRPC
// control plane, connects and presents it; the worker checks the ticket and the peer's
// SO_PEERCRED credentials, creates the region (a memfd sealed against shrinking and growing, so
// that neither side can make the other's mapping fault), and passes its descriptor (SCM_RIGHTS);
// the router maps it, checks it and copies the worker's token into the region, which proves it
// shares that memory with the worker; the worker compares the tokens and both start.
//
//   router                              worker
//   Hello{ticket, pid}          --->    admit(ticket, SO_PEERCRED) ? create region : refuse
//                               <---    Offer{status, ring_bytes} + memfd
//   map, validate, copy token,
//   router PeerWord attached
//   Ack                         --->    router_token == worker_token ?
//                               <---    Done{status}; worker PeerWord attached
//
// Every step has a timeout (the socket's send and receive timeouts), so a silent peer cannot
// hold either side. Errors: PERMISSION_DENIED (ticket or credentials refused, token mismatch),
// UNAVAILABLE (socket errors, the peer went away), INVALID_ARGUMENT (a malformed message or
// region), DEADLINE_EXCEEDED, INTERNAL (memfd/mmap failures).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/shm/region.h"

namespace moe::shm {

inline constexpr size_t kTicketBytes = 16;

// SO_PEERCRED of a Unix socket peer. pid is in this process's pid namespace: 0 when the peer
// lives in a namespace this one cannot see (another container of a pod without a shared
// process namespace).
struct PeerCredentials {
  int32_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

// A region mapped into this process, owning the mapping and its descriptor. Thread-safe to
// read; the view's atomics are what the two sides share.
class MappedRegion {
 public:
  // A new sealed memfd region with rings of `ring_bytes`, formatted with `token`.
  // REQUIRES: ValidRingCapacity(ring_bytes).
  static absl::StatusOr<std::unique_ptr<MappedRegion>> Create(uint32_t ring_bytes,
                                                              const uint64_t token[2]);
  // Maps a region received from the creator; takes ownership of `fd`. INVALID_ARGUMENT when it
  // is not sealed against shrinking or is not a region of this version.
  static absl::StatusOr<std::unique_ptr<MappedRegion>> Map(int fd);
  ~MappedRegion();
  MappedRegion(const MappedRegion&) = delete;
  MappedRegion& operator=(const MappedRegion&) = delete;

  const RegionView& view() const { return view_; }
  int fd() const { return fd_; }

 private:
  MappedRegion(int fd, void* base, uint64_t bytes, RegionView view)
      : fd_(fd), base_(base), bytes_(bytes), view_(view) {}
  const int fd_;
  void* const base_;
  const uint64_t bytes_;
  const RegionView view_;
};

// A listening Unix socket (SOCK_SEQPACKET) at a path; the destructor closes and unlinks it.
class UnixListener {
 public:
  // INVALID_ARGUMENT when the path does not fit a sockaddr_un; UNAVAILABLE when it cannot bind.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Listen(const std::string& path);
  ~UnixListener();
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // The next connection (a descriptor the caller owns), or DEADLINE_EXCEEDED after `timeout`.
  absl::StatusOr<int> Accept(absl::Duration timeout);
  const std::string& path() const { return path_; }

 private:
  UnixListener(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  const int fd_;
  const std::string path_;
};

// Decides whether a peer may have a region: its ticket (kTicketBytes) and credentials.
using AdmitFn = std::function<absl::Status(absl::string_view ticket, const PeerCredentials& peer)>;

// The worker's side on an accepted connection (closed on return). On success the region's
// worker PeerWord is attached with this pid, and `*peer` holds the router's credentials.
absl::StatusOr<std::unique_ptr<MappedRegion>> ServeHandshake(int fd, uint32_t ring_bytes,
                                                             const AdmitFn& admit,
                                                             absl::Duration timeout,
                                                             PeerCredentials* peer);

// The router's side. On success the region's router PeerWord is attached with this pid.
absl::StatusOr<std::unique_ptr<MappedRegion>> ConnectHandshake(const std::string& socket_path,
                                                               absl::string_view ticket,
                                                               absl::Duration timeout);

// This host's kernel boot id (/proc/sys/kernel/random/boot_id), "" when unreadable: two
// processes with different boot ids cannot share memory, so negotiation skips the socket.
std::string HostBootId();

// kTicketBytes random bytes (getrandom).
std::string RandomTicket();

}  // namespace moe::shm
