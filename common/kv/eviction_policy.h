// Which cached-but-unreferenced KV block to reuse when the free list is empty.
//
// The BlockManager hands a block to its policy when the block becomes evictable (its reference
// count drops to 0 while it is still registered in the prefix cache), takes it back when a prefix
// hit revives it, and asks for a victim when it needs a block and none is free.
//
// Thread-compatibility: not thread-safe; owned and called by one BlockManager.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace moe::kv {

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // `block_id` became evictable. REQUIRES: 0 <= block_id < the pool size; not already held.
  virtual void Add(int32_t block_id) = 0;
  // `block_id` is no longer evictable (a prefix hit claimed it). REQUIRES: held.
  virtual void Remove(int32_t block_id) = 0;
  // Chooses a victim, stops holding it and returns it. REQUIRES: Size() > 0.
  virtual int32_t Evict() = 0;
  // Number of blocks held.
  virtual int64_t Size() const = 0;
  // Whether `block_id` is held.
  virtual bool Contains(int32_t block_id) const = 0;
  // Held blocks in eviction order (next victim first). For debugging and tests; O(Size()).
  virtual std::vector<int32_t> EvictionOrder() const = 0;
};

// Least recently released first: the block whose reference count dropped to 0 longest ago is
// evicted first. O(1) per operation, no allocation after construction (an intrusive list over
// block ids).
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  // REQUIRES: num_blocks >= 0.
  explicit LruEvictionPolicy(int32_t num_blocks);

  // EvictionPolicy
  void Add(int32_t block_id) override;
  void Remove(int32_t block_id) override;
  int32_t Evict() override;
  int64_t Size() const override { return size_; }
  bool Contains(int32_t block_id) const override;
  std::vector<int32_t> EvictionOrder() const override;

 private:
  static constexpr int32_t kNone = -1;
  // Doubly linked list; node `num_blocks` is the sentinel (next = oldest, prev = newest).
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  std::vector<bool> held_;
  int32_t sentinel_;
  int64_t size_ = 0;
};

enum class EvictionPolicyKind { kLru };

// The built-in policy of that kind for a pool of `num_blocks`.
std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind, int32_t num_blocks);

}  // namespace moe::kv
