// A single-producer single-consumer ring of variable-size records in memory that two processes
// share (the expert data plane's request and response rings, region.h).
//
// Layout: a RingControl (the two indices and the two "I sleep" flags, each side's on its own
// cache line) and a data area of `capacity` bytes (a power of two, a multiple of kRecordAlign).
// A record is a 64-byte RecordPrefix followed by its payload, padded to a multiple of 64 bytes,
// and always contiguous: when a record would cross the end of the data area, the producer
// writes a pad record to the end and starts over at offset 0.
//
// Protocol. `head` counts bytes published (the producer's), `tail` bytes released (the
// consumer's); both are free-running uint32 counters, so used = head - tail (mod 2^32) and a
// position is counter & (capacity - 1). The producer writes a record (prefix and payload)
// into free space and then stores head with release semantics (seq_cst); the consumer loads
// head with acquire semantics before it reads a record, so it never sees a record whose bytes
// are still being written: a producer that dies mid-write never publishes it. The consumer
// reads the record in place and stores tail (seq_cst) once it no longer needs the bytes; the
// producer loads tail (acquire) before it reuses them. The indices are std::atomic, which is
// what ThreadSanitizer sees; futexes (futex.h) only put a waiter to sleep.
//
// Wake-ups. A waiter spins for at most `spin_ns`, then sets its sleeping flag (seq_cst),
// re-checks, and sleeps on the other side's index word with a timeout; the other side, after
// each store of its index (seq_cst), wakes it only when the flag is set (Dekker style: at
// least one of the two sees the other's store). A waiter therefore never spins beyond its
// bounded spin, and the timeout lets it check the peer's liveness (region.h) and its deadline.
//
// Hostile or broken peers: both sides keep their own copy of their index and only read the
// peer's; every record prefix is copied out and checked (size, alignment, fits in what was
// published) before use. A check that fails sets broken(), and the side stops using the ring.
//
// Thread-safety: one RingProducer and one RingConsumer per ring, each used by one thread at a
// time (they may be in different processes). Nothing here allocates or takes a lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace moe::shm {

inline constexpr uint32_t kRecordAlign = 64;
inline constexpr uint32_t kRecordPrefixBytes = 64;  // one cache line before each payload

// The shared part of one ring. Zero-initialised = empty.
struct RingControl {
  alignas(64) std::atomic<uint32_t> head{0};   // bytes published; written by the producer only
  std::atomic<uint32_t> consumer_sleeping{0};  // the consumer sleeps (or is about to) on head
  alignas(64) std::atomic<uint32_t> tail{0};   // bytes released; written by the consumer only
  std::atomic<uint32_t> producer_sleeping{0};  // the producer sleeps (or is about to) on tail
};

// Whether `capacity` is usable: a power of two in [2 * kRecordAlign, 2^31].
bool ValidRingCapacity(uint64_t capacity);

// Bytes one record with `payload_bytes` takes in the ring (prefix and padding included).
uint64_t RecordBytes(uint64_t payload_bytes);

// Counters of one side, for tests and metrics (plain: owned by that side's thread).
struct RingSideStats {
  uint64_t records = 0;      // records published / consumed
  uint64_t pads = 0;         // pad records written / skipped
  uint64_t futex_waits = 0;  // times this side went to sleep
  uint64_t futex_wakes = 0;  // times this side woke the other
};

class RingProducer {
 public:
  // REQUIRES: ValidRingCapacity(capacity); `control` and `data` stay mapped while in use.
  RingProducer(RingControl* control, std::byte* data, uint32_t capacity);

  // The largest payload one record can carry at all (the ring empty).
  uint32_t max_payload() const { return capacity_ - kRecordPrefixBytes; }

  // Reserves room for a record of `payload_bytes` and returns where its payload goes, or
  // nullptr when the ring has no room now (or never will: payload > max_payload(), or
  // broken()). The record is invisible to the consumer until Publish(). At most one
  // reservation is open at a time; a second TryReserve replaces the first.
  std::byte* TryReserve(uint32_t payload_bytes);
  // Makes the open reservation visible and wakes the consumer if it sleeps.
  void Publish();
  // Drops the open reservation (nothing becomes visible).
  void Cancel() { reserved_ = 0; }

  // Waits until the consumer releases bytes (tail moves past what the last TryReserve saw),
  // at most `spin_ns` spinning and then asleep until `timeout_ns` (from the call) passes.
  // Returns true when tail moved.
  bool WaitForSpace(int64_t spin_ns, int64_t timeout_ns);

  // Bytes neither published nor reserved, as of the last look at tail.
  uint32_t free_bytes() const;
  bool broken() const { return broken_; }
  const RingSideStats& stats() const { return stats_; }

 private:
  RingControl* const control_;
  std::byte* const data_;
  const uint32_t capacity_;
  uint32_t head_ = 0;      // == control_->head (we are its only writer)
  uint32_t reserved_ = 0;  // bytes of the open reservation (pad included)
  uint32_t seen_tail_ = 0;
  bool broken_ = false;
  RingSideStats stats_;
};

// One published record, read in place: `payload` stays valid until Release().
struct RingRecord {
  std::byte* payload = nullptr;
  uint32_t payload_bytes = 0;
};

class RingConsumer {
 public:
  // REQUIRES: as RingProducer.
  RingConsumer(RingControl* control, std::byte* data, uint32_t capacity);

  // The oldest record not yet released, if one is published: true and `*out` set. Pad records
  // are released on the way. False when none is published (or broken()).
  bool TryPeek(RingRecord* out);
  // Releases the record the last successful TryPeek returned (records go in order) and wakes
  // the producer if it sleeps. No-op without one.
  void Release();

  // Waits until the producer publishes (head moves past what this side has consumed), at most
  // `spin_ns` spinning and then asleep until `timeout_ns` passes. True when head moved.
  bool WaitForData(int64_t spin_ns, int64_t timeout_ns);

  bool broken() const { return broken_; }
  const RingSideStats& stats() const { return stats_; }

 private:
  void Advance(uint32_t bytes);

  RingControl* const control_;
  std::byte* const data_;
  const uint32_t capacity_;
  uint32_t tail_ = 0;    // == control_->tail (we are its only writer)
  uint32_t peeked_ = 0;  // bytes of the record handed out by TryPeek, not yet released
  bool broken_ = false;
  RingSideStats stats_;
};

// Waits until `word` != `seen`: spins at most `spin_ns`, then announces itself in `sleeping`
// and sleeps on the futex until `timeout_ns` (from the call) passes. True when the word
// changed. `futex_waits` (optional) counts the sleeps.
bool WaitWhileEqual(const std::atomic<uint32_t>& word, uint32_t seen,
                    std::atomic<uint32_t>& sleeping, int64_t spin_ns, int64_t timeout_ns,
                    uint64_t* futex_waits = nullptr);

}  // namespace moe::shm
