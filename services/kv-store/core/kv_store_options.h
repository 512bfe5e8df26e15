// Configuration of the kv-store's core (kv_store_core.h): tier budgets, compression, eviction.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/kv/eviction_policy.h"
#include "services/kv-store/core/kv_codec.h"

namespace moe::kv_store {

struct KvStoreCoreOptions {
  // L2: host memory for blocks, bytes (after compression). Bigger = more hits, more RAM.
  int64_t l2_bytes = 1ll << 30;
  // L3: local-disk blocks, bytes of files. Survives restarts.
  int64_t l3_bytes = 8ll << 30;
  // L3's directory (blocks/ and responses/ below it); "" = no L3 (and no response cache).
  std::string l3_dir;
  // none | zstd (lossless, kept only where it saves >= min_savings; the default) | int8 (lossy,
  // cluster-wide: every router must set kv_store.lossy_int8, and outputs change).
  CompressionMode compression = CompressionMode::kZstd;
  int32_t zstd_level = 1;
  // A block stays compressed only when that saves at least this fraction of its bytes: f32 K/V
  // saves 8-12% (measured: `moe bench kv-store`), not worth a decode on every read, so it is kept
  // raw (and served zero-copy); bf16/f16 or more regular K/V compress further.
  double min_savings = 0.2;
  // lru | threshold (evict cold entries first, see ThresholdPolicyOptions; LRU when none is).
  kv::EvictionPolicyKind eviction_policy = kv::EvictionPolicyKind::kLru;
  kv::ThresholdPolicyOptions threshold;
  // threshold: how often cold entries are dropped (L2: demoted to L3) without space pressure.
  absl::Duration sweep_interval = absl::Minutes(1);
  // Copy a block read from L3 into L2 (the next read is from memory).
  bool promote_on_l3_hit = true;
  // L3 writes are queued (write-behind: every Put reaches L3 soon after, and an L2 eviction
  // of a block not yet on disk demotes it); beyond this many queued bytes a block stays
  // L2-only (and is lost from the cache when L2 evicts it).
  int64_t l3_write_queue_bytes = 256ll << 20;
  // Cached responses (the router's exact response cache), bytes of files under l3_dir.
  int64_t response_cache_bytes = 256ll << 20;
  // Largest block accepted, bytes (a bench-preset block of 16 tokens is 256 KiB in f32).
  int64_t max_block_bytes = 64ll << 20;

  static void Describe(common::config::Schema<KvStoreCoreOptions>& s) {
    s.Add("l2_bytes", &KvStoreCoreOptions::l2_bytes, "L2 (host memory) budget, bytes").Min(0);
    s.Add("l3_bytes", &KvStoreCoreOptions::l3_bytes, "L3 (disk) budget, bytes").Min(0);
    s.Add("l3_dir", &KvStoreCoreOptions::l3_dir, "L3 directory; empty = no L3");
    s.AddEnum("compression", &KvStoreCoreOptions::compression,
              {{"none", CompressionMode::kNone},
               {"zstd", CompressionMode::kZstd},
               {"int8", CompressionMode::kInt8}},
              "zstd: lossless where it pays; int8: lossy, cluster-wide, changes outputs");
    s.Add("zstd_level", &KvStoreCoreOptions::zstd_level, "zstd level").Range(1, 19);
    s.Add("min_savings", &KvStoreCoreOptions::min_savings,
          "keep a block compressed only when it saves at least this fraction")
        .Range(0.0, 0.99);
    s.AddEnum(
        "eviction_policy", &KvStoreCoreOptions::eviction_policy,
        {{"lru", kv::EvictionPolicyKind::kLru}, {"threshold", kv::EvictionPolicyKind::kThreshold}},
        "lru, or threshold (cold entries first, then LRU)");
    s.Section("threshold", &KvStoreCoreOptions::threshold);
    s.Add("sweep_interval", &KvStoreCoreOptions::sweep_interval,
          "threshold policy: how often cold entries are dropped")
        .Min(absl::Seconds(1));
    s.Add("promote_on_l3_hit", &KvStoreCoreOptions::promote_on_l3_hit,
          "copy blocks read from L3 into L2");
    s.Add("l3_write_queue_bytes", &KvStoreCoreOptions::l3_write_queue_bytes,
          "queued L3 writes, bytes")
        .Min(0);
    s.Add("response_cache_bytes", &KvStoreCoreOptions::response_cache_bytes,
          "cached responses on disk, bytes")
        .Min(0);
    s.Add("max_block_bytes", &KvStoreCoreOptions::max_block_bytes, "largest block, bytes")
        .Range(1, 1ll << 30);
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

}  // namespace moe::kv_store
