#include "services/router/testing/fake_kv_tier.h"

namespace moe::router::testing {

void FakeKvTier::Clear() {
  blocks_.clear();
  corrupt_.clear();
  in_l3_.clear();
  absl::MutexLock lock(&mu_);
  responses_.clear();
}

int64_t FakeKvTier::num_response_lookups() const {
  absl::MutexLock lock(&mu_);
  return num_response_lookups_;
}

int64_t FakeKvTier::num_responses() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(responses_.size());
}

void FakeKvTier::Fetch(std::span<KvFetch> fetches, KvBlockWriter& writer) {
  ++num_fetch_calls_;
  for (size_t i = 0; i < fetches.size(); ++i) {
    KvFetch& f = fetches[i];
    f.num_fetched = 0;
    f.num_from_l2 = 0;
    if (!available_) continue;
    for (size_t j = 0; j < f.hashes.size(); ++j) {
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
}

int64_t FakeKvTier::Store(const kv::BlockHash&, std::span<const kv::BlockHash> hashes,
                          absl::FunctionRef<void(size_t, std::span<uint8_t>)> read) {
  if (!available_) {
    num_dropped_ += static_cast<int64_t>(hashes.size());
    return 0;
  }
  int64_t n = static_cast<int64_t>(hashes.size());
  if (store_capacity_ >= 0) n = std::min(n, store_capacity_);
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

}  // namespace moe::router::testing
