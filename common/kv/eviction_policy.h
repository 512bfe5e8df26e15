// Which cache entry to give up when space is needed: the policy interface shared by the router's
// L1 block manager and the kv-store's L2/L3 tiers, and its two implementations.
//
// Entries are named by small non-negative int32 ids (L1: block ids; the kv-store: slot ids of its
// index). The owner hands an entry to its policy when it becomes evictable (L1: its reference
// count drops to 0 while it is still registered in the prefix cache; kv-store: when stored),
// takes it back when it stops being evictable (Remove), reports how it is used (RecordLookup),
// and asks for a victim when it needs room (EvictVictim).
//
//   LruEvictionPolicy        least recently used first (an O(1) intrusive list).
//   ThresholdEvictionPolicy  evicts an entry that is cold by the numbers (below), else falls back
//                            to least recently used; judged on an injected clock.
//
// Ids need not be dense or bounded up front: the policies grow their tables to the largest id
// added (a constructor size only pre-allocates).
//
// Thread-compatibility: not thread-safe; owned and called under its owner's lock or thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/config/schema.h"

namespace moe::kv {

// Why a victim was chosen: the `reason` label of moe_kv_evictions_total.
enum class EvictionReason : uint8_t {
  kLru,        // space was needed and it was the least recently used entry
  kThreshold,  // the threshold policy found it cold (low hit rate, long idle, not hit recently)
};
// "lru" | "threshold".
std::string_view EvictionReasonName(EvictionReason reason);

struct Victim {
  int32_t block_id = -1;
  EvictionReason reason = EvictionReason::kLru;
  friend bool operator==(const Victim&, const Victim&) = default;
};

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // `block_id` became evictable; it counts as just used. REQUIRES: block_id >= 0; not held.
  virtual void Add(int32_t block_id) = 0;
  // `block_id` is no longer evictable (a prefix hit claimed it, or its owner dropped it).
  // REQUIRES: held.
  virtual void Remove(int32_t block_id) = 0;
  // Chooses a victim, stops holding it and returns it with the reason. REQUIRES: Size() > 0.
  virtual Victim EvictVictim() = 0;
  // Number of entries held.
  virtual int64_t Size() const = 0;
  // Whether `block_id` is held (false for any id never added, negative ones included).
  virtual bool Contains(int32_t block_id) const = 0;
  // Held entries in the order EvictVictim would take them if it fell back to recency (next LRU
  // victim first). For debugging and tests; O(Size()).
  virtual std::vector<int32_t> EvictionOrder() const = 0;

  // A lookup reached held entry `block_id`; `hit` = it was served (a use: the entry becomes the
  // most recently used). What "reached" means is the owner's (the kv-store: kv_store_core.h).
  // REQUIRES: held.
  virtual void RecordLookup(int32_t block_id, bool hit) = 0;

  // Entries that qualify for eviction on their own right now (the threshold policy's cold
  // entries; never any for LRU), at most `max`, removed from the policy and returned: the
  // owner's periodic sweep drops (or demotes) them without waiting for space pressure.
  virtual std::vector<Victim> TakeQualifying(int64_t max) { return {}; }

  // EvictVictim().block_id: the L1 block manager needs no reason.
  int32_t Evict() { return EvictVictim().block_id; }
};

// Least recently used first: the entry added (or hit) longest ago is evicted first. O(1) per
// operation; allocates only when an id beyond the tables is added.
class LruEvictionPolicy final : public EvictionPolicy {
 public:
  // Pre-allocates for ids [0, num_blocks). REQUIRES: num_blocks >= 0.
  explicit LruEvictionPolicy(int32_t num_blocks = 0);

  // Moves held `block_id` to the most recent end. REQUIRES: held.
  void Touch(int32_t block_id);
  // The least recently used held entry without removing it; -1 when empty.
  int32_t Oldest() const { return size_ > 0 ? head_ : kNone; }
  // The next more recently used held entry after `block_id`; -1 at the end.
  int32_t Newer(int32_t block_id) const { return next_[block_id]; }

  // EvictionPolicy
  void Add(int32_t block_id) override;
  void Remove(int32_t block_id) override;
  Victim EvictVictim() override;
  int64_t Size() const override { return size_; }
  bool Contains(int32_t block_id) const override;
  std::vector<int32_t> EvictionOrder() const override;
  void RecordLookup(int32_t block_id, bool hit) override;

 private:
  static constexpr int32_t kNone = -1;
  void Grow(int32_t block_id);

  // Doubly linked list over ids, oldest (head_) to newest (tail_).
  std::vector<int32_t> prev_;
  std::vector<int32_t> next_;
  std::vector<bool> held_;
  int32_t head_ = kNone;
  int32_t tail_ = kNone;
  int64_t size_ = 0;
};

// The threshold policy's four numbers (issue 11; all configurable). An entry qualifies for
// eviction when all three hold:
//   - its hit rate, hits / lookups that reached it, is below min_hit_rate (no lookup yet: 0);
//   - it has been idle (not added or hit) for longer than min_idle;
//   - it was hit fewer than protect_hits times within the last `window`.
struct ThresholdPolicyOptions {
  // Hit-rate floor in [0, 1]. Higher evicts more entries that are hit now and then.
  double min_hit_rate = 0.6;
  // Idle time before an entry can qualify. Shorter frees space sooner, and risks dropping
  // entries whose users come back.
  absl::Duration min_idle = absl::Hours(2);
  // Hits within `window` that protect an entry whatever its hit rate. 1..64.
  int32_t protect_hits = 5;
  // The recent window those hits are counted in; should exceed min_idle to matter.
  absl::Duration window = absl::Hours(24);
  // Most idle entries EvictVictim examines before falling back to LRU (bounds its cost when
  // many old entries are protected).
  int32_t max_scan = 64;

  static void Describe(common::config::Schema<ThresholdPolicyOptions>& s) {
    s.Add("min_hit_rate", &ThresholdPolicyOptions::min_hit_rate,
          "entries hit less often than this (hits / lookups) may qualify")
        .Range(0.0, 1.0);
    s.Add("min_idle", &ThresholdPolicyOptions::min_idle, "idle time before an entry can qualify")
        .Min(absl::ZeroDuration());
    s.Add("protect_hits", &ThresholdPolicyOptions::protect_hits,
          "hits within `window` that protect an entry")
        .Range(1, 64);
    s.Add("window", &ThresholdPolicyOptions::window, "the window protect_hits are counted in")
        .Min(absl::ZeroDuration());
    s.Add("max_scan", &ThresholdPolicyOptions::max_scan,
          "idle entries examined per eviction before falling back to LRU")
        .Range(1, 1 << 20);
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// The threshold policy: EvictVictim returns the least recently used entry that qualifies (reason
// kThreshold), examining idle entries oldest first (at most max_scan); when none qualifies, the
// least recently used entry (reason kLru). O(1) per Add/Remove/RecordLookup.
class ThresholdEvictionPolicy final : public EvictionPolicy {
 public:
  // REQUIRES: options.Validate().ok(). `clock` is borrowed and must outlive the policy.
  ThresholdEvictionPolicy(const ThresholdPolicyOptions& options, common::Clock& clock);

  // Whether held `block_id` qualifies now (see ThresholdPolicyOptions). REQUIRES: held.
  bool Qualifies(int32_t block_id) const;
  // Lookups that reached `block_id` and hits, since it was added. REQUIRES: held.
  int64_t lookups(int32_t block_id) const { return stats_[block_id].lookups; }
  int64_t hits(int32_t block_id) const { return stats_[block_id].hits; }

  // EvictionPolicy
  void Add(int32_t block_id) override;
  void Remove(int32_t block_id) override;
  Victim EvictVictim() override;
  int64_t Size() const override { return lru_.Size(); }
  bool Contains(int32_t block_id) const override { return lru_.Contains(block_id); }
  std::vector<int32_t> EvictionOrder() const override { return lru_.EvictionOrder(); }
  void RecordLookup(int32_t block_id, bool hit) override;
  std::vector<Victim> TakeQualifying(int64_t max) override;

 private:
  struct Stats {
    int64_t lookups = 0;
    int64_t hits = 0;
    absl::Time last_use;
    // The times of the last protect_hits hits, a ring; `num_hit_times` of them are set.
    std::vector<absl::Time> hit_times;
    int32_t next_hit = 0;
  };
  bool QualifiesAt(int32_t block_id, absl::Time now) const;

  const ThresholdPolicyOptions options_;
  common::Clock& clock_;
  LruEvictionPolicy lru_;     // by last use
  std::vector<Stats> stats_;  // by id; valid while held
};

enum class EvictionPolicyKind { kLru, kThreshold };

// The L1 block manager's policy of that kind for a pool of `num_blocks` (kLru only: the block
// manager has no clock; kThreshold returns null).
std::unique_ptr<EvictionPolicy> MakeEvictionPolicy(EvictionPolicyKind kind, int32_t num_blocks);

}  // namespace moe::kv
