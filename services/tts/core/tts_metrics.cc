#include "services/tts/core/tts_metrics.h"

namespace moe::tts {

namespace m = common::metrics;

TtsMetrics::TtsMetrics(m::Registry& r)
    : first_chunk_seconds(r.AddHistogram("moe_tts_first_chunk_seconds",
                                         "First segment ready to its first audio chunk.",
                                         m::LatencyBuckets())),
      stage_tts_seconds(r.AddHistogram("moe_stage_seconds", "Time spent per pipeline stage.",
                                       m::LatencyBuckets(), {{"stage", "tts"}})),
      streams_active(r.AddGauge("moe_tts_streams_active", "Synthesis streams open.")),
      streams_total(r.AddCounter("moe_tts_streams_total", "Synthesis streams opened.")),
      rejected_total(r.CounterFamily("moe_tts_rejected_streams_total",
                                     "Streams refused or ended early, by reason.")),
      segments_total(r.AddCounter("moe_tts_segments_total", "Segments synthesized.")),
      audio_seconds_total(r.AddCounter("moe_tts_audio_seconds_total", "Audio produced, seconds.")) {
}

}  // namespace moe::tts
