#include "services/kv-store/core/kv_store_metrics.h"

#include <string>

namespace moe::kv_store {

KvStoreMetrics::KvStoreMetrics(common::metrics::Registry& r)
    : corrupt_blocks(r.AddCounter("moe_kv_corrupt_blocks_total",
                                  "Blocks (and cached responses) dropped: checksum mismatch.")),
      response_cache_hits(r.AddCounter("moe_response_cache_hits_total",
                                       "Exact response cache hits (responses served).")),
      response_cache_queries(
          r.AddCounter("moe_response_cache_queries_total", "Exact response cache lookups.")),
      put_declined(r.AddCounter("moe_kv_store_put_declined_total",
                                "Blocks a Put did not store (larger than L2).")),
      l3_queue_bytes(
          r.AddGauge("moe_kv_store_l3_queue_bytes", "Bytes waiting to be written to L3.")),
      compression_skipped(r.AddCounter(
          "moe_kv_store_compression_skipped_total",
          "Blocks stored uncompressed without trying zstd: the blocks before them did not pay.")) {
  const char* tiers[2] = {"l2", "l3"};
  for (int t = 0; t < 2; ++t) {
    const common::metrics::Labels tier{{"tier", tiers[t]}};
    usage_ratio[t] = &r.AddGauge("moe_kv_usage_ratio", "Used fraction of the KV cache tier.", tier);
    queries[t] =
        &r.AddCounter("moe_prefix_cache_queries_total",
                      "Prefix cache lookups, in blocks (those every tier above missed).", tier);
    hits[t] = &r.AddCounter("moe_prefix_cache_hits_total", "Prefix cache hits, in blocks.", tier);
    bytes_put[t] = &r.AddCounter("moe_kv_store_bytes_total", "Bytes stored and loaded.",
                                 {{"tier", tiers[t]}, {"op", "put"}});
    bytes_get[t] = &r.AddCounter("moe_kv_store_bytes_total", "Bytes stored and loaded.",
                                 {{"tier", tiers[t]}, {"op", "get"}});
    put_seconds[t] =
        &r.AddHistogram("moe_kv_store_op_seconds", "Store and load latency.",
                        common::metrics::LatencyBuckets(), {{"tier", tiers[t]}, {"op", "put"}});
    get_seconds[t] =
        &r.AddHistogram("moe_kv_store_op_seconds", "Store and load latency.",
                        common::metrics::LatencyBuckets(), {{"tier", tiers[t]}, {"op", "get"}});
    for (kv::EvictionReason reason : {kv::EvictionReason::kLru, kv::EvictionReason::kThreshold}) {
      evictions[t][static_cast<int>(reason)] = &r.AddCounter(
          "moe_kv_evictions_total", "Entries evicted from a tier (L2: demoted to L3).",
          {{"tier", tiers[t]}, {"reason", std::string(kv::EvictionReasonName(reason))}});
    }
  }
}

}  // namespace moe::kv_store
