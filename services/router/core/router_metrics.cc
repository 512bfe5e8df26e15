#include "services/router/core/router_metrics.h"

namespace moe::router {
namespace {
using common::metrics::Labels;
using common::metrics::LatencyBuckets;
}  // namespace

RouterMetrics::RouterMetrics(common::metrics::Registry& r, const std::string& model,
                             bool vllm_aliases)
    : ttft_seconds(r.AddHistogram("moe_request_ttft_seconds", "Time to first token.",
                                  LatencyBuckets(), {{"model", model}})),
      tpot_seconds(r.AddHistogram("moe_request_tpot_seconds",
                                  "Time per output token after the first.", LatencyBuckets(),
                                  {{"model", model}})),
      e2e_seconds(r.AddHistogram("moe_request_e2e_seconds", "Request latency, arrival to finish.",
                                 LatencyBuckets(), {{"model", model}})),
      queue_seconds(r.AddHistogram("moe_request_queue_seconds",
                                   "Time from arrival to first scheduled step.", LatencyBuckets(),
                                   {{"model", model}})),
      requests_running(
          r.AddGauge("moe_requests_running", "Requests holding KV blocks.", {{"model", model}})),
      requests_waiting(r.AddGauge("moe_requests_waiting", "Requests queued, not yet admitted.",
                                  {{"model", model}})),
      requests_total{},
      prompt_tokens_total(r.AddCounter("moe_prompt_tokens_total",
                                       "Prompt tokens of admitted requests.", {{"model", model}})),
      generation_tokens_total(
          r.AddCounter("moe_generation_tokens_total", "Tokens generated.", {{"model", model}})),
      cached_prompt_tokens_total(r.AddCounter("moe_cached_prompt_tokens_total",
                                              "Prompt tokens served from the prefix cache.",
                                              {{"model", model}})),
      kv_usage_ratio_l1(r.AddGauge("moe_kv_usage_ratio", "Used fraction of the KV cache tier.",
                                   {{"tier", "l1"}})),
      prefix_cache_queries_total_l1(r.AddCounter(
          "moe_prefix_cache_queries_total", "Prefix cache lookups, in blocks.", {{"tier", "l1"}})),
      prefix_cache_hits_total_l1(r.AddCounter("moe_prefix_cache_hits_total",
                                              "Prefix cache hits, in blocks.", {{"tier", "l1"}})),
      prefix_cache_queries_total_l2(r.AddCounter(
          "moe_prefix_cache_queries_total", "Prefix cache lookups, in blocks.", {{"tier", "l2"}})),
      prefix_cache_hits_total_l2(r.AddCounter("moe_prefix_cache_hits_total",
                                              "Prefix cache hits, in blocks.", {{"tier", "l2"}})),
      prefix_cache_queries_total_l3(r.AddCounter(
          "moe_prefix_cache_queries_total", "Prefix cache lookups, in blocks.", {{"tier", "l3"}})),
      prefix_cache_hits_total_l3(r.AddCounter("moe_prefix_cache_hits_total",
                                              "Prefix cache hits, in blocks.", {{"tier", "l3"}})),
      kv_fetch_seconds(r.AddHistogram("moe_stage_seconds", "Time per pipeline stage.",
                                      LatencyBuckets(), {{"stage", "kv_fetch"}})),
      response_cache_hits_total(r.AddCounter("moe_response_cache_hits_total",
                                             "Requests answered from the exact response cache.")) {
  if (vllm_aliases) {
    vllm_num_requests_waiting =
        &r.AddGauge("vllm:num_requests_waiting",
                    "Requests waiting (Gateway API Inference Extension).", {{"model_name", model}});
    vllm_kv_cache_usage_perc = &r.AddGauge(
        "vllm:kv_cache_usage_perc", "KV cache usage in [0, 1] (Gateway API Inference Extension).",
        {{"model_name", model}});
  }
  using generation::FinishReason;
  for (FinishReason reason :
       {FinishReason::kStop, FinishReason::kLength, FinishReason::kAbort, FinishReason::kError}) {
    requests_total[static_cast<int>(reason)] = &r.AddCounter(
        "moe_requests_total", "Finished requests by finish reason.",
        Labels{{"model", model}, {"finish_reason", std::string(FinishReasonName(reason))}});
  }
  requests_total[0] = requests_total[static_cast<int>(FinishReason::kError)];
}

}  // namespace moe::router
