// The kv-store's metrics, with DESIGN.md §5's names (dashboards and alert rules use them).
#pragma once

#include <array>

#include "common/kv/eviction_policy.h"
#include "common/metrics/registry.h"

namespace moe::kv_store {

// A store tier, as metric labels and proto/moe/kv_store/v1 Tier name them.
enum class Tier : uint8_t { kNone = 0, kL2 = 1, kL3 = 2 };

// Built once from an injected registry. Thread-safe (prometheus-cpp series are).
struct KvStoreMetrics {
  explicit KvStoreMetrics(common::metrics::Registry& registry);

  // Indexed by tier - 1 (l2, l3).
  std::array<common::metrics::Gauge*, 2> usage_ratio;      // moe_kv_usage_ratio{tier}
  std::array<common::metrics::Counter*, 2> queries;        // moe_prefix_cache_queries_total{tier}
  std::array<common::metrics::Counter*, 2> hits;           // moe_prefix_cache_hits_total{tier}
  std::array<common::metrics::Counter*, 2> bytes_put;      // moe_kv_store_bytes_total{tier,op=put}
  std::array<common::metrics::Counter*, 2> bytes_get;      // ...{op=get}
  std::array<common::metrics::Histogram*, 2> put_seconds;  // moe_kv_store_op_seconds{tier,op}
  std::array<common::metrics::Histogram*, 2> get_seconds;
  // moe_kv_evictions_total{tier,reason}: [tier - 1][reason].
  std::array<std::array<common::metrics::Counter*, 2>, 2> evictions;
  common::metrics::Counter& corrupt_blocks;          // moe_kv_corrupt_blocks_total
  common::metrics::Counter& response_cache_hits;     // moe_response_cache_hits_total
  common::metrics::Counter& response_cache_queries;  // moe_response_cache_queries_total
  common::metrics::Counter& put_declined;            // moe_kv_store_put_declined_total (blocks)
  common::metrics::Gauge& l3_queue_bytes;            // moe_kv_store_l3_queue_bytes
  // moe_kv_store_compression_skipped_total: blocks kept raw without a zstd try (kv_codec.h
  // CompressionBackoff: recent blocks did not compress).
  common::metrics::Counter& compression_skipped;

  common::metrics::Counter& Evictions(Tier tier, kv::EvictionReason reason) {
    return *evictions[static_cast<int>(tier) - 1][static_cast<int>(reason)];
  }
};

}  // namespace moe::kv_store
