// The ASR service's metrics (DESIGN.md §5 names), from an injected registry.
#pragma once

#include "common/metrics/registry.h"

namespace moe::asr {

struct AsrMetrics {
  explicit AsrMetrics(common::metrics::Registry& r);

  // End of speech decided (the endpoint, or FINALIZE) -> final transcript ready.
  common::metrics::Histogram& finalize_seconds;
  // Decoding time / audio time over the last core.realtime_factor_window, all streams.
  common::metrics::Gauge& realtime_factor;
  // moe_stage_seconds{stage="asr"}: decoding time of each audio chunk.
  common::metrics::Histogram& stage_asr_seconds;
  common::metrics::Gauge& streams_active;
  common::metrics::Counter& streams_total;
  // Streams refused or ended early, by reason (busy, invalid, too_long).
  common::metrics::Family<common::metrics::Counter>& rejected_total;
  common::metrics::Counter& audio_seconds_total;
  common::metrics::Counter& utterances_total;
};

}  // namespace moe::asr
