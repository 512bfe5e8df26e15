// The TTS service's metrics (DESIGN.md §5 names), from an injected registry.
#pragma once

#include "common/metrics/registry.h"

namespace moe::tts {

struct TtsMetrics {
  explicit TtsMetrics(common::metrics::Registry& r);

  // A stream's first segment complete (its boundary seen, a flush, or the end of the text) ->
  // its first audio chunk handed to the transport.
  common::metrics::Histogram& first_chunk_seconds;
  // moe_stage_seconds{stage="tts"}: synthesis of each segment.
  common::metrics::Histogram& stage_tts_seconds;
  common::metrics::Gauge& streams_active;
  common::metrics::Counter& streams_total;
  // Streams refused or ended early, by reason (busy, invalid, too_long).
  common::metrics::Family<common::metrics::Counter>& rejected_total;
  common::metrics::Counter& segments_total;
  common::metrics::Counter& audio_seconds_total;
};

}  // namespace moe::tts
