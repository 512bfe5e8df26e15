#include "common/shm/ring.h"

#include <cstring>

#include "common/shm/futex.h"

namespace moe::shm {
namespace {

constexpr uint32_t kKindData = 0x44415441;  // "DATA"
constexpr uint32_t kKindPad = 0x50414421;   // "PAD!"

// The first bytes of every record's 64-byte prefix. Written by the producer before it
// publishes; copied out by the consumer before it trusts any of it.
struct RecordPrefix {
  uint32_t bytes;          // the whole record, prefix and padding included; a multiple of 64
  uint32_t kind;           // kKindData or kKindPad
  uint32_t payload_bytes;  // data records: the payload's exact size
  uint32_t reserved;
};
static_assert(sizeof(RecordPrefix) <= kRecordPrefixBytes);

uint32_t RoundUp(uint64_t n) {
  return static_cast<uint32_t>((n + kRecordAlign - 1) / kRecordAlign * kRecordAlign);
}

void WritePrefix(std::byte* at, uint32_t bytes, uint32_t kind, uint32_t payload_bytes) {
  const RecordPrefix p{bytes, kind, payload_bytes, 0};
  std::memcpy(at, &p, sizeof(p));
}

}  // namespace

bool ValidRingCapacity(uint64_t capacity) {
  return capacity >= 2 * kRecordAlign && capacity <= (uint64_t{1} << 31) &&
         (capacity & (capacity - 1)) == 0;
}

uint64_t RecordBytes(uint64_t payload_bytes) {
  return (kRecordPrefixBytes + payload_bytes + kRecordAlign - 1) / kRecordAlign * kRecordAlign;
}

bool WaitWhileEqual(const std::atomic<uint32_t>& word, uint32_t seen,
                    std::atomic<uint32_t>& sleeping, int64_t spin_ns, int64_t timeout_ns,
                    uint64_t* futex_waits) {
  if (word.load(std::memory_order_acquire) != seen) return true;
  const int64_t start = MonotonicNowNs();
  if (spin_ns > 0) {
    // Read the clock every 64 pauses (~2-4 us): cheap enough, and the spin stays bounded.
    for (int i = 1;; ++i) {
      CpuRelax();
      if (word.load(std::memory_order_acquire) != seen) return true;
      if ((i & 63) == 0 && MonotonicNowNs() - start >= spin_ns) break;
    }
  }
  const int64_t sleep_ns = timeout_ns - (MonotonicNowNs() - start);
  if (sleep_ns <= 0) return false;
  sleeping.store(1, std::memory_order_seq_cst);
  bool changed = word.load(std::memory_order_seq_cst) != seen;
  if (!changed) {
    if (futex_waits != nullptr) ++*futex_waits;
    FutexWait(&word, seen, sleep_ns);
    changed = word.load(std::memory_order_acquire) != seen;
  }
  sleeping.store(0, std::memory_order_relaxed);
  return changed;
}

RingProducer::RingProducer(RingControl* control, std::byte* data, uint32_t capacity)
    : control_(control), data_(data), capacity_(capacity) {
  head_ = control_->head.load(std::memory_order_relaxed);
  seen_tail_ = control_->tail.load(std::memory_order_acquire);
}

uint32_t RingProducer::free_bytes() const {
  const uint32_t used = head_ - seen_tail_;
  return used > capacity_ ? 0 : capacity_ - used - reserved_;
}

std::byte* RingProducer::TryReserve(uint32_t payload_bytes) {
  reserved_ = 0;
  if (broken_ || payload_bytes > max_payload()) return nullptr;
  const uint32_t need = RoundUp(uint64_t{kRecordPrefixBytes} + payload_bytes);
  const uint32_t tail = control_->tail.load(std::memory_order_acquire);
  const uint32_t used = head_ - tail;
  if (used > capacity_) {  // the consumer's index is beyond ours: corrupt
    broken_ = true;
    return nullptr;
  }
  seen_tail_ = tail;
  const uint32_t free = capacity_ - used;
  const uint32_t pos = head_ & (capacity_ - 1);
  const uint32_t to_end = capacity_ - pos;
  // A record that would cross the end: pad to it and start at 0. (Starting over at 0 whenever
  // the ring is empty would keep the working set small, but its pad holds the whole end of the
  // ring until the consumer skips it, which starves a second record sent meanwhile.)
  const uint32_t pad = need > to_end ? to_end : 0;
  if (uint64_t{pad} + need > free) return nullptr;
  if (pad > 0) {
    WritePrefix(data_ + pos, pad, kKindPad, 0);
    ++stats_.pads;
  }
  const uint32_t start = pad > 0 ? 0 : pos;
  WritePrefix(data_ + start, need, kKindData, payload_bytes);
  reserved_ = pad + need;
  return data_ + start + kRecordPrefixBytes;
}

void RingProducer::Publish() {
  if (reserved_ == 0) return;
  head_ += reserved_;
  reserved_ = 0;
  ++stats_.records;
  control_->head.store(head_, std::memory_order_seq_cst);
  if (control_->consumer_sleeping.load(std::memory_order_seq_cst) != 0) {
    ++stats_.futex_wakes;
    FutexWakeAll(&control_->head);
  }
}

bool RingProducer::WaitForSpace(int64_t spin_ns, int64_t timeout_ns) {
  return WaitWhileEqual(control_->tail, seen_tail_, control_->producer_sleeping, spin_ns,
                        timeout_ns, &stats_.futex_waits);
}

RingConsumer::RingConsumer(RingControl* control, std::byte* data, uint32_t capacity)
    : control_(control), data_(data), capacity_(capacity) {
  tail_ = control_->tail.load(std::memory_order_relaxed);
}

void RingConsumer::Advance(uint32_t bytes) {
  tail_ += bytes;
  control_->tail.store(tail_, std::memory_order_seq_cst);
  if (control_->producer_sleeping.load(std::memory_order_seq_cst) != 0) {
    ++stats_.futex_wakes;
    FutexWakeAll(&control_->tail);
  }
}

bool RingConsumer::TryPeek(RingRecord* out) {
  if (broken_) return false;
  if (peeked_ != 0) Release();  // the previous record was not released: records go in order
  while (true) {
    const uint32_t head = control_->head.load(std::memory_order_acquire);
    const uint32_t used = head - tail_;
    if (used == 0) return false;
    const uint32_t pos = tail_ & (capacity_ - 1);
    RecordPrefix p;
    std::memcpy(&p, data_ + pos, sizeof(p));
    if (used > capacity_ || p.bytes < kRecordAlign || p.bytes % kRecordAlign != 0 ||
        p.bytes > used || p.bytes > capacity_ - pos ||
        (p.kind != kKindData && p.kind != kKindPad) ||
        (p.kind == kKindData && uint64_t{p.payload_bytes} + kRecordPrefixBytes > p.bytes)) {
      broken_ = true;
      return false;
    }
    if (p.kind == kKindPad) {
      ++stats_.pads;
      Advance(p.bytes);
      continue;
    }
    out->payload = data_ + pos + kRecordPrefixBytes;
    out->payload_bytes = p.payload_bytes;
    peeked_ = p.bytes;
    return true;
  }
}

void RingConsumer::Release() {
  if (peeked_ == 0) return;
  const uint32_t bytes = peeked_;
  peeked_ = 0;
  ++stats_.records;
  Advance(bytes);
}

bool RingConsumer::WaitForData(int64_t spin_ns, int64_t timeout_ns) {
  return WaitWhileEqual(control_->head, tail_ + peeked_, control_->consumer_sleeping, spin_ns,
                        timeout_ns, &stats_.futex_waits);
}

}  // namespace moe::shm
