// The shared-memory region of one (router, expert worker) pair: a 4 KiB header, then the
// request ring's data (router -> worker), then the response ring's data (worker -> router).
//
//   offset 0       RegionHeader: magic, version, ring size, the co-location tokens, one
//                  PeerWord per side (state, heartbeat, pid), the two RingControls
//   4096           request ring data   [ring_bytes]
//   4096 + R       response ring data  [ring_bytes]
//
// The worker creates the region (a sealed memfd, handshake.h) and initialises it; the router
// maps it, checks it with ValidateRegion and proves it shares the memory by copying
// worker_token into router_token (the worker compares them before serving).
//
// Liveness. Each side owns its PeerWord: `state` (attached, then closed on an orderly exit)
// and `heartbeat`, bumped every few milliseconds by a Heartbeat thread of its process. The
// other side's PeerMonitor calls it gone when it closed or when its heartbeat stood still for
// the peer timeout, which is how a router notices a worker killed with SIGKILL mid-call (and a
// worker a crashed router) without any socket: waiters sleep with a timeout and look.
//
// Thread-safety: the header's atomics are shared by the two processes; Heartbeat is
// thread-safe; a PeerMonitor belongs to one thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "common/shm/ring.h"

namespace moe::shm {

inline constexpr uint64_t kRegionMagic = 0x314D4853454F4D31ull;  // "1MOESHM1"
inline constexpr uint32_t kRegionVersion = 1;
inline constexpr uint32_t kRegionHeaderBytes = 4096;
inline constexpr size_t kTokenBytes = 16;

enum PeerState : uint32_t {
  kPeerAbsent = 0,    // not attached yet
  kPeerAttached = 1,  // serving / calling
  kPeerClosed = 2,    // left in order (a crashed peer never gets here: see PeerMonitor)
};

// One side's liveness, written only by that side.
struct PeerWord {
  std::atomic<uint32_t> state{kPeerAbsent};
  std::atomic<uint32_t> heartbeat{0};  // bumped by the side's Heartbeat thread
  std::atomic<uint32_t> pid{0};        // in the side's own pid namespace (logs only)
};

struct RegionHeader {
  uint64_t magic = 0;
  uint32_t version = 0;
  uint32_t header_bytes = 0;
  uint32_t ring_bytes = 0;  // each ring's data, a valid ring capacity
  uint32_t reserved = 0;
  std::atomic<uint64_t> worker_token[2];  // written by the worker at creation
  std::atomic<uint64_t> router_token[2];  // the router copies worker_token here
  alignas(64) PeerWord router;
  alignas(64) PeerWord worker;
  alignas(64) RingControl requests;   // router produces, worker consumes
  alignas(64) RingControl responses;  // worker produces, router consumes
};
static_assert(sizeof(RegionHeader) <= kRegionHeaderBytes);

// Bytes of a region whose rings hold `ring_bytes` each.
inline uint64_t RegionBytes(uint32_t ring_bytes) {
  return kRegionHeaderBytes + 2 * static_cast<uint64_t>(ring_bytes);
}

// A mapped region's parts (pointers into the mapping; not owning).
struct RegionView {
  RegionHeader* header = nullptr;
  std::byte* request_data = nullptr;   // [ring_bytes]
  std::byte* response_data = nullptr;  // [ring_bytes]
  uint32_t ring_bytes = 0;
};

// Formats zeroed memory of RegionBytes(ring_bytes) at `base` (the creator: the worker).
// REQUIRES: ValidRingCapacity(ring_bytes), `base` 64-byte aligned.
RegionView InitRegion(void* base, uint32_t ring_bytes, const uint64_t token[2]);

// Checks a region someone else created, mapped with `mapped_bytes`: magic, version, sizes.
// False (and *out untouched) when it is not a region of this version or does not fit.
bool ValidateRegion(void* base, uint64_t mapped_bytes, RegionView* out);

// Judges the other side's PeerWord. Time comes from the caller (now_ns, any monotonic clock
// the caller keeps using), so tests can drive it.
class PeerMonitor {
 public:
  PeerMonitor(const PeerWord* peer, int64_t timeout_ns, int64_t now_ns);
  // False once the peer closed the region, or when its heartbeat has not moved for
  // `timeout_ns` up to `now_ns` (it was killed, or is frozen). Stays false after that.
  bool Alive(int64_t now_ns);

 private:
  const PeerWord* const peer_;
  const int64_t timeout_ns_;
  uint32_t last_beat_;
  int64_t last_change_ns_;
  bool dead_ = false;
};

// One thread per process that bumps the heartbeat of every PeerWord added to it, every
// `interval_ns`. Not a compute thread: it wakes, does a few relaxed increments, sleeps.
class Heartbeat {
 public:
  explicit Heartbeat(int64_t interval_ns);
  ~Heartbeat();  // stops and joins the thread
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // Starts beating `word` (bumps it once now). REQUIRES: `word` stays valid until Remove.
  void Add(PeerWord* word);
  // Stops beating `word`; once it returns the thread no longer touches it.
  void Remove(PeerWord* word);

 private:
  void Loop();

  const int64_t interval_ns_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PeerWord*> words_;  // guarded by mu_
  bool stop_ = false;             // guarded by mu_
  std::thread thread_;
};

}  // namespace moe::shm
