#include "services/router/testing/fake_kv_tier.h"

namespace moe::router::testing {

void FakeKvTier::Corrupt(const kv::BlockHash& hash) {
  absl::MutexLock lock(&mu_);
  corrupt_.insert(hash);
}

void FakeKvTier::MoveToL3(const kv::BlockHash& hash) {
  absl::MutexLock lock(&mu_);
  in_l3_.insert(hash);
}

void FakeKvTier::Clear() {
  absl::MutexLock lock(&mu_);
  blocks_.clear();
  corrupt_.clear();
  in_l3_.clear();
  responses_.clear();
}

void FakeKvTier::Hold(int64_t after_blocks) {
  absl::MutexLock lock(&mu_);
  held_ = true;
  hold_after_ = after_blocks;
}

void FakeKvTier::Release() {
  absl::MutexLock lock(&mu_);
  held_ = false;
}

void FakeKvTier::WaitForHeld(int64_t n) {
  absl::MutexLock lock(&mu_);
  auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return num_held_ >= n; };
  mu_.Await(absl::Condition(&reached));
}

void FakeKvTier::WaitForNoFetch() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return num_active_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

bool FakeKvTier::Contains(const kv::BlockHash& hash) const {
  absl::MutexLock lock(&mu_);
  return blocks_.contains(hash);
}

int64_t FakeKvTier::num_blocks() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(blocks_.size());
}

int64_t FakeKvTier::num_stored() const {
  absl::MutexLock lock(&mu_);
  return num_stored_;
}

int64_t FakeKvTier::num_dropped() const {
  absl::MutexLock lock(&mu_);
  return num_dropped_;
}

int64_t FakeKvTier::num_fetched() const {
  absl::MutexLock lock(&mu_);
  return num_fetched_;
}

int64_t FakeKvTier::num_fetch_calls() const {
  absl::MutexLock lock(&mu_);
  return num_fetch_calls_;
}

int64_t FakeKvTier::num_response_lookups() const {
  absl::MutexLock lock(&mu_);
  return num_response_lookups_;
}

int64_t FakeKvTier::num_responses() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(responses_.size());
}

void FakeKvTier::Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer, absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  ++num_fetch_calls_;
  ++num_active_;
  const absl::Time deadline = absl::Now() + std::min(timeout, fetch_timeout_);
  for (size_t i = 0; i < fetches.size(); ++i) {
    KvFetch& f = fetches[i];
    f.num_fetched = 0;
    f.num_from_l2 = 0;
    bool waited = false;
    for (size_t j = 0; j < f.hashes.size(); ++j) {
      if (!waited && held_ && static_cast<int64_t>(j) >= hold_after_) {
        // A slow tier: wait at the latch (the mutex is released meanwhile).
        waited = true;
        ++num_held_;
        auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !held_; };
        const bool in_time = mu_.AwaitWithDeadline(absl::Condition(&released), deadline);
        --num_held_;
        if (!in_time) break;  // its deadline passed at the latch: what arrived counts
      }
      if (!available_) break;
      if (max_fetch_blocks_ >= 0 && static_cast<int64_t>(j) >= max_fetch_blocks_) break;
      auto it = blocks_.find(f.hashes[j]);
      if (it == blocks_.end()) break;
      // Delivered in two fragments, as a network read would.
      const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(it->second.data()),
                                           it->second.size());
      const size_t half = bytes.size() / 2;
      writer.Write(i, j, 0, bytes.subspan(0, half));
      writer.Write(i, j, static_cast<int64_t>(half), bytes.subspan(half));
      if (corrupt_.contains(f.hashes[j])) break;
      ++f.num_fetched;
      ++num_fetched_;
      if (!in_l3_.contains(f.hashes[j])) ++f.num_from_l2;
    }
  }
  --num_active_;
}

int64_t FakeKvTier::Store(const kv::BlockHash&, std::span<const kv::BlockHash> hashes,
                          absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) {
  absl::MutexLock lock(&mu_);
  if (!available_) {
    num_dropped_ += static_cast<int64_t>(hashes.size());
    return 0;
  }
  int64_t n = static_cast<int64_t>(hashes.size());
  if (store_capacity_ >= 0) n = std::min<int64_t>(n, store_capacity_);
  for (int64_t i = 0; i < n; ++i) {
    std::string data(static_cast<size_t>(block_bytes_), '\0');
    read(static_cast<size_t>(i), {reinterpret_cast<uint8_t*>(data.data()), data.size()});
    blocks_[hashes[i]] = std::move(data);
  }
  num_stored_ += n;
  num_dropped_ += static_cast<int64_t>(hashes.size()) - n;
  return n;
}

std::optional<CachedResponse> FakeKvTier::LookupResponse(const kv::BlockHash& key) {
  absl::MutexLock lock(&mu_);
  ++num_response_lookups_;
  if (!available_) return std::nullopt;
  auto it = responses_.find(key);
  if (it == responses_.end()) return std::nullopt;
  return it->second;
}

void FakeKvTier::StoreResponse(const kv::BlockHash& key, const CachedResponse& response) {
  absl::MutexLock lock(&mu_);
  if (available_) responses_[key] = response;
}

void FakeKvTier::SetEngineBusy(bool busy) {
  absl::MutexLock lock(&mu_);
  engine_busy_calls_.push_back(busy);
}

std::vector<bool> FakeKvTier::engine_busy_calls() const {
  absl::MutexLock lock(&mu_);
  return engine_busy_calls_;
}

}  // namespace moe::router::testing
