#include "services/gateway/core/gateway_metrics.h"

namespace moe::gateway {

namespace metrics = common::metrics;

GatewayMetrics::GatewayMetrics(metrics::Registry& r, const std::string& model)
    : ttft_seconds(r.AddHistogram("moe_request_ttft_seconds", "Time to first token.",
                                  metrics::LatencyBuckets(), {{"model", model}})),
      tpot_seconds(r.AddHistogram("moe_request_tpot_seconds", "Time per output token.",
                                  metrics::LatencyBuckets(), {{"model", model}})),
      e2e_seconds(r.AddHistogram("moe_request_e2e_seconds", "Request latency, end to end.",
                                 metrics::LatencyBuckets(), {{"model", model}})),
      requests_running(
          r.AddGauge("moe_requests_running", "Generations in flight.", {{"model", model}})),
      requests_total(r.CounterFamily("moe_requests_total", "Finished requests.")),
      prompt_tokens_total(
          r.AddCounter("moe_prompt_tokens_total", "Prompt tokens.", {{"model", model}})),
      generation_tokens_total(
          r.AddCounter("moe_generation_tokens_total", "Generated tokens.", {{"model", model}})),
      cached_prompt_tokens_total(r.AddCounter("moe_cached_prompt_tokens_total",
                                              "Prompt tokens served from the KV cache.",
                                              {{"model", model}})),
      stage_parse_seconds(r.AddHistogram("moe_stage_seconds", "Time per pipeline stage.",
                                         metrics::LatencyBuckets(), {{"stage", "parse"}})),
      stage_route_seconds(r.AddHistogram("moe_stage_seconds", "Time per pipeline stage.",
                                         metrics::LatencyBuckets(), {{"stage", "route"}})),
      stage_render_seconds(r.AddHistogram("moe_stage_seconds", "Time per pipeline stage.",
                                          metrics::LatencyBuckets(), {{"stage", "render"}})),
      http_responses_total(
          r.CounterFamily("moe_gateway_http_responses_total", "HTTP answers by status code.")),
      rejected_total(r.CounterFamily("moe_gateway_rejected_total",
                                     "Requests refused before generation, by reason.")),
      slow_clients_closed_total(r.AddCounter(
          "moe_gateway_slow_clients_closed_total",
          "Connections closed because the client stopped reading (write bound or timeout).")),
      stream_read_pauses_total(
          r.AddCounter("moe_gateway_stream_read_pauses_total",
                       "Router stream reads paused while the client was behind (back-pressure).")),
      pending_write_bytes(r.AddGauge("moe_gateway_pending_write_bytes",
                                     "Response bytes queued in the gateway, not yet sent.")),
      connections_open(r.AddGauge("moe_gateway_connections_open", "Open HTTP connections.")),
      model_(model) {}

void GatewayMetrics::CountFinish(generation::FinishReason reason) {
  // kNone never ends a request; count it as an error rather than invent a label value.
  const std::string name(
      reason == generation::FinishReason::kNone ? "error" : generation::FinishReasonName(reason));
  requests_total.Add({{"model", model_}, {"finish_reason", name}}).Increment();
}

}  // namespace moe::gateway
