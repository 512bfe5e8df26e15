// The gateway's metrics (DESIGN.md §5 names), declared once from an injected registry.
#pragma once

#include <string>

#include "common/generation/finish_reason.h"
#include "common/metrics/registry.h"

namespace moe::gateway {

struct GatewayMetrics {
  GatewayMetrics(common::metrics::Registry& r, const std::string& model);

  // Finished generations by finish_reason (stop, length, abort, error).
  void CountFinish(generation::FinishReason reason);

  common::metrics::Histogram& ttft_seconds;
  common::metrics::Histogram& tpot_seconds;
  common::metrics::Histogram& e2e_seconds;
  common::metrics::Gauge& requests_running;
  common::metrics::Family<common::metrics::Counter>& requests_total;
  common::metrics::Counter& prompt_tokens_total;
  common::metrics::Counter& generation_tokens_total;
  common::metrics::Counter& cached_prompt_tokens_total;
  common::metrics::Histogram& stage_parse_seconds;   // moe_stage_seconds{stage="parse"}
  common::metrics::Histogram& stage_route_seconds;   // {stage="route"}: until the first token
  common::metrics::Histogram& stage_render_seconds;  // {stage="render"}
  // HTTP answers by status code, and requests refused before generation by reason
  // (auth, rate_limit, overloaded, draining, invalid, too_large).
  common::metrics::Family<common::metrics::Counter>& http_responses_total;
  common::metrics::Family<common::metrics::Counter>& rejected_total;
  // Connections cut off because the client stopped reading (http.max_pending_write_bytes or
  // http.write_timeout).
  common::metrics::Counter& slow_clients_closed_total;
  // Back-pressure: times a router stream's reads were paused because its client was more than
  // http.stream_read_pause_bytes behind, and the response bytes queued in the gateway, unsent,
  // over every connection.
  common::metrics::Counter& stream_read_pauses_total;
  common::metrics::Gauge& pending_write_bytes;
  common::metrics::Gauge& connections_open;

 private:
  const std::string model_;
};

}  // namespace moe::gateway
