#include "services/asr/core/asr_metrics.h"

namespace moe::asr {

namespace m = common::metrics;

AsrMetrics::AsrMetrics(m::Registry& r)
    : finalize_seconds(r.AddHistogram("moe_asr_finalize_seconds",
                                      "End of speech to final transcript.", m::LatencyBuckets())),
      realtime_factor(r.AddGauge("moe_asr_realtime_factor",
                                 "Decoding time / audio time over the last window.")),
      stage_asr_seconds(r.AddHistogram("moe_stage_seconds", "Time spent per pipeline stage.",
                                       m::LatencyBuckets(), {{"stage", "asr"}})),
      streams_active(r.AddGauge("moe_asr_streams_active", "Recognition streams open.")),
      streams_total(r.AddCounter("moe_asr_streams_total", "Recognition streams opened.")),
      rejected_total(r.CounterFamily("moe_asr_rejected_streams_total",
                                     "Streams refused or ended early, by reason.")),
      audio_seconds_total(r.AddCounter("moe_asr_audio_seconds_total", "Audio decoded, seconds.")),
      utterances_total(r.AddCounter("moe_asr_utterances_total", "Final transcripts sent.")) {}

}  // namespace moe::asr
