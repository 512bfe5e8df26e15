#include "common/kv/eviction_policy.h"

#include "common/base/check.h"

namespace moe::kv {

LruEvictionPolicy::LruEvictionPolicy(int32_t num_blocks)
    : prev_(num_blocks + 1, kNone),
      next_(num_blocks + 1, kNone),
      held_(num_blocks, false),
      sentinel_(num_blocks) {
  MOE_CHECK(num_blocks >= 0);
  prev_[sentinel_] = sentinel_;
  next_[sentinel_] = sentinel_;
}

void LruEvictionPolicy::Add(int32_t block_id) {
  MOE_DCHECK(block_id >= 0 && block_id < sentinel_);
  MOE_DCHECK(!held_[block_id]);
  // Newest goes just before the sentinel (the tail).
  const int32_t tail = prev_[sentinel_];
  prev_[block_id] = tail;
  next_[block_id] = sentinel_;
  next_[tail] = block_id;
  prev_[sentinel_] = block_id;
  held_[block_id] = true;
  ++size_;
}

void LruEvictionPolicy::Remove(int32_t block_id) {
  MOE_DCHECK(block_id >= 0 && block_id < sentinel_);
  MOE_DCHECK(held_[block_id]);
  next_[prev_[block_id]] = next_[block_id];
  prev_[next_[block_id]] = prev_[block_id];
  prev_[block_id] = kNone;
  next_[block_id] = kNone;
  held_[block_id] = false;
  --size_;
}

int32_t LruEvictionPolicy::Evict() {
  MOE_CHECK(size_ > 0);
  const int32_t victim = next_[sentinel_];
  Remove(victim);
  return victim;
}

bool LruEvictionPolicy::Contains(int32_t block_id) const {
  return block_id >= 0 && block_id < sentinel_ && held_[block_id];
}

std::vector<int32_t> LruEvictionPolicy::EvictionOrder() const {
  std::vector<int32_t> out;
  out.reserve(size_);
  for (int32_t b = next_[sentinel_]; b != sentinel_; b = next_[b]) out.push_back(b);
  return out;
}

std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind, int32_t num_blocks) {
  switch (kind) {
    case EvictionPolicyKind::kLru:
      return std::make_unique<LruEvictionPolicy>(num_blocks);
  }
  return nullptr;
}

}  // namespace moe::kv
