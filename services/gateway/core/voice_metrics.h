// The voice parts' metrics in the gateway (DESIGN.md §5 names), from an injected registry.
//
// moe_stage_seconds{stage}: the voice pipeline's stages as the gateway sees them, per reply to
// a spoken turn:
//   asr                   end of speech (the asr service's SPEECH_STOPPED) -> final transcript
//   voice_prefill         generation sent -> first token (the rest of the prompt's prefill)
//   voice_first_sentence  first token -> the first text segment complete in the tts service
//   tts                   that segment complete -> its first audio (the tts service's report)
//   voice_pipeline        end of speech decided -> first reply audio byte sent to the client
#pragma once

#include "common/metrics/registry.h"

namespace moe::gateway {

struct VoiceMetrics {
  explicit VoiceMetrics(common::metrics::Registry& r);

  common::metrics::Histogram& stage_asr_seconds;
  common::metrics::Histogram& stage_prefill_seconds;
  common::metrics::Histogram& stage_first_sentence_seconds;
  common::metrics::Histogram& stage_tts_seconds;
  common::metrics::Histogram& stage_pipeline_seconds;
  common::metrics::Gauge& realtime_sessions_active;
  // Realtime responses by status (completed, cancelled, failed, incomplete).
  common::metrics::Family<common::metrics::Counter>& responses_total;
  common::metrics::Counter& barge_ins_total;
  common::metrics::Counter& speculative_prefills_total;
  common::metrics::Counter& speculative_prefill_tokens_total;
  common::metrics::Counter& transcriptions_total;
  // /v1/audio/speech answers by response_format.
  common::metrics::Family<common::metrics::Counter>& speech_total;
};

}  // namespace moe::gateway
