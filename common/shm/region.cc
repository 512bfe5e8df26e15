#include "common/shm/region.h"

#include <algorithm>
#include <chrono>
#include <new>

namespace moe::shm {

RegionView InitRegion(void* base, uint32_t ring_bytes, const uint64_t token[2]) {
  auto* h = new (base) RegionHeader();
  h->magic = kRegionMagic;
  h->version = kRegionVersion;
  h->header_bytes = kRegionHeaderBytes;
  h->ring_bytes = ring_bytes;
  for (int i = 0; i < 2; ++i) {
    h->worker_token[i].store(token[i], std::memory_order_relaxed);
    h->router_token[i].store(0, std::memory_order_relaxed);
  }
  auto* bytes = static_cast<std::byte*>(base);
  return {h, bytes + kRegionHeaderBytes, bytes + kRegionHeaderBytes + ring_bytes, ring_bytes};
}

bool ValidateRegion(void* base, uint64_t mapped_bytes, RegionView* out) {
  if (mapped_bytes < kRegionHeaderBytes) return false;
  auto* h = static_cast<RegionHeader*>(base);
  if (h->magic != kRegionMagic || h->version != kRegionVersion ||
      h->header_bytes != kRegionHeaderBytes || !ValidRingCapacity(h->ring_bytes) ||
      RegionBytes(h->ring_bytes) != mapped_bytes) {
    return false;
  }
  auto* bytes = static_cast<std::byte*>(base);
  *out = {h, bytes + kRegionHeaderBytes, bytes + kRegionHeaderBytes + h->ring_bytes, h->ring_bytes};
  return true;
}

PeerMonitor::PeerMonitor(const PeerWord* peer, int64_t timeout_ns, int64_t now_ns)
    : peer_(peer),
      timeout_ns_(timeout_ns),
      last_beat_(peer->heartbeat.load(std::memory_order_relaxed)),
      last_change_ns_(now_ns) {}

bool PeerMonitor::Alive(int64_t now_ns) {
  if (dead_) return false;
  if (peer_->state.load(std::memory_order_acquire) == kPeerClosed) {
    dead_ = true;
    return false;
  }
  const uint32_t beat = peer_->heartbeat.load(std::memory_order_relaxed);
  if (beat != last_beat_) {
    last_beat_ = beat;
    last_change_ns_ = now_ns;
    return true;
  }
  if (now_ns - last_change_ns_ > timeout_ns_) dead_ = true;
  return !dead_;
}

Heartbeat::Heartbeat(int64_t interval_ns) : interval_ns_(std::max<int64_t>(interval_ns, 1'000)) {
  thread_ = std::thread([this] { Loop(); });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::Add(PeerWord* word) {
  std::lock_guard<std::mutex> lock(mu_);
  word->heartbeat.fetch_add(1, std::memory_order_relaxed);
  words_.push_back(word);
}

void Heartbeat::Remove(PeerWord* word) {
  std::lock_guard<std::mutex> lock(mu_);
  words_.erase(std::remove(words_.begin(), words_.end(), word), words_.end());
}

void Heartbeat::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    for (PeerWord* w : words_) w->heartbeat.fetch_add(1, std::memory_order_relaxed);
    cv_.wait_for(lock, std::chrono::nanoseconds(interval_ns_), [this] { return stop_; });
  }
}

}  // namespace moe::shm
