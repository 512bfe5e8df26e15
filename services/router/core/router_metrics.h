// The router's request and L1-cache metrics, with the exact names of DESIGN.md §5 (dashboards and
// alert rules use them), plus, when asked (core.vllm_metric_aliases), the two gauges
// Gateway-API-Inference-Extension gateways route on under vLLM's names. Those are off by default:
// `promtool check metrics` rejects the ':' in them, and an endpoint picker can read
// moe_requests_waiting and moe_kv_usage_ratio{tier="l1"} instead (DESIGN.md §5).
#pragma once

#include <array>
#include <string>

#include "common/generation/finish_reason.h"
#include "common/metrics/registry.h"

namespace moe::router {

// Built once per scheduler from an injected registry. Thread-safe (prometheus-cpp series are).
struct RouterMetrics {
  // `model` is the value of the `model` label (the served model's name). `vllm_aliases` also
  // registers vllm:num_requests_waiting and vllm:kv_cache_usage_perc.
  RouterMetrics(common::metrics::Registry& registry, const std::string& model,
                bool vllm_aliases = false);

  common::metrics::Histogram& ttft_seconds;   // arrival -> first token
  common::metrics::Histogram& tpot_seconds;   // (last token - first token) / (tokens - 1)
  common::metrics::Histogram& e2e_seconds;    // arrival -> finish
  common::metrics::Histogram& queue_seconds;  // arrival -> first scheduled
  common::metrics::Gauge& requests_running;
  common::metrics::Gauge& requests_waiting;
  // moe_requests_total{finish_reason}, indexed by FinishReason (kNone unused).
  std::array<common::metrics::Counter*, 5> requests_total;
  common::metrics::Counter& prompt_tokens_total;
  common::metrics::Counter& generation_tokens_total;
  common::metrics::Counter& cached_prompt_tokens_total;
  common::metrics::Gauge& kv_usage_ratio_l1;                // moe_kv_usage_ratio{tier="l1"}
  common::metrics::Counter& prefix_cache_queries_total_l1;  // in blocks
  common::metrics::Counter& prefix_cache_hits_total_l1;     // in blocks
  // The kv-store's tiers as this router used them, in blocks: queries at l2 are the eligible
  // prompt blocks L1 missed, at l3 those L2 missed too; hits are the blocks fetched intact.
  common::metrics::Counter& prefix_cache_queries_total_l2;
  common::metrics::Counter& prefix_cache_hits_total_l2;
  common::metrics::Counter& prefix_cache_queries_total_l3;
  common::metrics::Counter& prefix_cache_hits_total_l3;
  common::metrics::Histogram& kv_fetch_seconds;         // moe_stage_seconds{stage="kv_fetch"}
  common::metrics::Counter& response_cache_hits_total;  // requests answered from it
  // Null unless vllm_aliases.
  common::metrics::Gauge* vllm_num_requests_waiting = nullptr;  // vllm:num_requests_waiting
  common::metrics::Gauge* vllm_kv_cache_usage_perc = nullptr;   // vllm:kv_cache_usage_perc, [0, 1]

  common::metrics::Counter& requests(generation::FinishReason reason) {
    return *requests_total[static_cast<int>(reason)];
  }
};

}  // namespace moe::router
