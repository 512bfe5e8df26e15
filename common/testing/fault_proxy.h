// A fault-injecting TCP proxy for tests: listens on 127.0.0.1, forwards every connection to an
// upstream port on 127.0.0.1, and applies a fault switchable at run time (to the connections
// already open and to new ones):
//
//   kPass       forward both ways
//   kDelay      sleep `delay` before forwarding each chunk read (either direction)
//   kDrop       after `after_bytes` more bytes (both directions, per connection, counted from
//               Set), close both sides (FIN)
//   kReset      the same, but reset both sides (SO_LINGER 0: the peers see ECONNRESET)
//   kBlackHole  accept and never answer: nothing is forwarded either way, sockets stay open
//               (switching back to kPass resumes forwarding of what was held)
//
//   auto proxy = FaultProxy::Start(upstream_port);
//   ... connect to (*proxy)->port() ...
//   (*proxy)->Set({.mode = FaultProxy::Mode::kReset, .after_bytes = 100});
//
// One thread accepts; one thread per connection polls its two sockets (10 ms ticks, so a new
// fault applies within a tick). Plain sockets + poll, nothing beyond loopback.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace moe::common::testing {

class FaultProxy {
 public:
  enum class Mode { kPass, kDelay, kDrop, kReset, kBlackHole };
  struct Fault {
    Mode mode = Mode::kPass;
    absl::Duration delay = absl::ZeroDuration();  // kDelay
    int64_t after_bytes = 0;                      // kDrop, kReset
  };

  // Listens on 127.0.0.1:`listen_port` (0 = any free port) and forwards to
  // 127.0.0.1:`upstream_port`.
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(int upstream_port, int listen_port = 0);
  ~FaultProxy();  // closes every connection and joins the threads
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  int port() const { return port_; }
  // "127.0.0.1:<port>".
  std::string address() const;

  void Set(Fault fault);
  Fault fault() const;

  // Connections accepted so far; connections ended by kDrop / kReset so far.
  int64_t accepted() const { return accepted_.load(); }
  int64_t cut() const { return cut_.load(); }

 private:
  FaultProxy(int listen_fd, int port, int upstream_port);
  void AcceptLoop();
  void Serve(int client_fd);
  // The fault and its generation (bumped by each Set).
  std::pair<Fault, int64_t> Current() const;

  const int listen_fd_;
  const int port_;
  const int upstream_port_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> accepted_{0};
  std::atomic<int64_t> cut_{0};
  mutable absl::Mutex mu_;
  Fault fault_ ABSL_GUARDED_BY(mu_);
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::thread> connections_ ABSL_GUARDED_BY(mu_);
  std::thread acceptor_;
};

}  // namespace moe::common::testing
