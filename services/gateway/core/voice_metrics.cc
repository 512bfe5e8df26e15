#include "services/gateway/core/voice_metrics.h"

namespace moe::gateway {

namespace m = common::metrics;

namespace {
m::Histogram& Stage(m::Registry& r, const char* stage) {
  return r.AddHistogram("moe_stage_seconds", "Time spent per pipeline stage.", m::LatencyBuckets(),
                        {{"stage", stage}});
}
}  // namespace

VoiceMetrics::VoiceMetrics(m::Registry& r)
    : stage_asr_seconds(Stage(r, "asr")),
      stage_prefill_seconds(Stage(r, "voice_prefill")),
      stage_first_sentence_seconds(Stage(r, "voice_first_sentence")),
      stage_tts_seconds(Stage(r, "tts")),
      stage_pipeline_seconds(Stage(r, "voice_pipeline")),
      realtime_sessions_active(
          r.AddGauge("moe_voice_realtime_sessions_active", "Open /v1/realtime sessions.")),
      responses_total(
          r.CounterFamily("moe_voice_responses_total", "Realtime responses by status.")),
      barge_ins_total(r.AddCounter("moe_voice_barge_ins_total",
                                   "Realtime responses cancelled by the user speaking.")),
      speculative_prefills_total(r.AddCounter("moe_voice_speculative_prefills_total",
                                              "Prefill-only calls made while the user spoke.")),
      speculative_prefill_tokens_total(r.AddCounter("moe_voice_speculative_prefill_tokens_total",
                                                    "Prompt tokens of the speculative prefills.")),
      transcriptions_total(
          r.AddCounter("moe_voice_transcriptions_total", "/v1/audio/transcriptions answered.")),
      speech_total(r.CounterFamily("moe_voice_speech_total",
                                   "/v1/audio/speech answered, by response_format.")) {}

}  // namespace moe::gateway
