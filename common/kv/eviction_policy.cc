#include "common/kv/eviction_policy.h"

#include <algorithm>

#include "common/base/check.h"

namespace moe::kv {

std::string_view EvictionReasonName(EvictionReason reason) {
  switch (reason) {
    case EvictionReason::kLru:
      return "lru";
    case EvictionReason::kThreshold:
      return "threshold";
  }
  return "lru";
}

// ---------------------------------------------------------------------------------------------
// LruEvictionPolicy

LruEvictionPolicy::LruEvictionPolicy(int32_t num_blocks) {
  MOE_CHECK(num_blocks >= 0);
  prev_.assign(num_blocks, kNone);
  next_.assign(num_blocks, kNone);
  held_.assign(num_blocks, false);
}

void LruEvictionPolicy::Grow(int32_t block_id) {
  if (static_cast<size_t>(block_id) < held_.size()) return;
  // Doubling keeps a store that adds ids one by one at amortised O(1).
  const size_t n = std::max<size_t>(static_cast<size_t>(block_id) + 1, 2 * held_.size());
  prev_.resize(n, kNone);
  next_.resize(n, kNone);
  held_.resize(n, false);
}

void LruEvictionPolicy::Add(int32_t block_id) {
  MOE_DCHECK(block_id >= 0);
  Grow(block_id);
  MOE_DCHECK(!held_[block_id]);
  prev_[block_id] = tail_;
  next_[block_id] = kNone;
  if (tail_ != kNone) {
    next_[tail_] = block_id;
  } else {
    head_ = block_id;
  }
  tail_ = block_id;
  held_[block_id] = true;
  ++size_;
}

void LruEvictionPolicy::Remove(int32_t block_id) {
  MOE_DCHECK(Contains(block_id));
  const int32_t p = prev_[block_id];
  const int32_t n = next_[block_id];
  if (p != kNone) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n != kNone) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  prev_[block_id] = kNone;
  next_[block_id] = kNone;
  held_[block_id] = false;
  --size_;
}

void LruEvictionPolicy::Touch(int32_t block_id) {
  if (tail_ == block_id) return;
  Remove(block_id);
  Add(block_id);
}

Victim LruEvictionPolicy::EvictVictim() {
  MOE_CHECK(size_ > 0);
  const int32_t victim = head_;
  Remove(victim);
  return {victim, EvictionReason::kLru};
}

bool LruEvictionPolicy::Contains(int32_t block_id) const {
  return block_id >= 0 && static_cast<size_t>(block_id) < held_.size() && held_[block_id];
}

std::vector<int32_t> LruEvictionPolicy::EvictionOrder() const {
  std::vector<int32_t> out;
  out.reserve(size_);
  for (int32_t b = head_; b != kNone; b = next_[b]) out.push_back(b);
  return out;
}

void LruEvictionPolicy::RecordLookup(int32_t block_id, bool hit) {
  if (hit) Touch(block_id);
}

// ---------------------------------------------------------------------------------------------
// ThresholdEvictionPolicy

ThresholdEvictionPolicy::ThresholdEvictionPolicy(const ThresholdPolicyOptions& options,
                                                 common::Clock& clock)
    : options_(options), clock_(clock) {
  MOE_CHECK(options_.Validate().ok());
}

void ThresholdEvictionPolicy::Add(int32_t block_id) {
  lru_.Add(block_id);
  if (static_cast<size_t>(block_id) >= stats_.size()) {
    stats_.resize(std::max<size_t>(static_cast<size_t>(block_id) + 1, 2 * stats_.size()));
  }
  Stats& s = stats_[block_id];
  s = Stats{};
  s.last_use = clock_.Now();
}

void ThresholdEvictionPolicy::Remove(int32_t block_id) {
  lru_.Remove(block_id);
  stats_[block_id].hit_times.clear();
}

void ThresholdEvictionPolicy::RecordLookup(int32_t block_id, bool hit) {
  MOE_DCHECK(lru_.Contains(block_id));
  Stats& s = stats_[block_id];
  ++s.lookups;
  if (!hit) return;
  ++s.hits;
  const absl::Time now = clock_.Now();
  s.last_use = now;
  if (s.hit_times.size() < static_cast<size_t>(options_.protect_hits)) {
    s.hit_times.push_back(now);
  } else {
    s.hit_times[s.next_hit] = now;
    s.next_hit = (s.next_hit + 1) % options_.protect_hits;
  }
  lru_.Touch(block_id);
}

bool ThresholdEvictionPolicy::QualifiesAt(int32_t block_id, absl::Time now) const {
  const Stats& s = stats_[block_id];
  if (now - s.last_use <= options_.min_idle) return false;
  const double rate =
      s.lookups > 0 ? static_cast<double>(s.hits) / static_cast<double>(s.lookups) : 0.0;
  if (rate >= options_.min_hit_rate) return false;
  // Protected by protect_hits hits within the window: with a full ring, the oldest of the last
  // protect_hits hits is inside it.
  if (s.hit_times.size() == static_cast<size_t>(options_.protect_hits)) {
    const absl::Time oldest_recent = s.hit_times[s.next_hit];
    if (now - oldest_recent <= options_.window) return false;
  }
  return true;
}

bool ThresholdEvictionPolicy::Qualifies(int32_t block_id) const {
  MOE_DCHECK(lru_.Contains(block_id));
  return QualifiesAt(block_id, clock_.Now());
}

Victim ThresholdEvictionPolicy::EvictVictim() {
  MOE_CHECK(lru_.Size() > 0);
  std::vector<Victim> cold = TakeQualifying(1);
  if (!cold.empty()) return cold[0];
  const Victim v = lru_.EvictVictim();
  stats_[v.block_id].hit_times.clear();
  return v;
}

std::vector<Victim> ThresholdEvictionPolicy::TakeQualifying(int64_t max) {
  std::vector<Victim> out;
  const absl::Time now = clock_.Now();
  int32_t scanned = 0;
  // The list is ordered by last use, so entries idle long enough are a prefix of it.
  for (int32_t b = lru_.Oldest();
       b != -1 && static_cast<int64_t>(out.size()) < max && scanned < options_.max_scan;) {
    const int32_t next = lru_.Newer(b);
    if (now - stats_[b].last_use <= options_.min_idle) break;
    ++scanned;
    if (QualifiesAt(b, now)) {
      Remove(b);
      out.push_back({b, EvictionReason::kThreshold});
    }
    b = next;
  }
  return out;
}

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind, int32_t num_blocks) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return std::make_unique<LruEvictionPolicy>(num_blocks);
    case EvictionPolicyKind::kThreshold:
      return nullptr;
  }
  return nullptr;
}

}  // namespace moe::kv
