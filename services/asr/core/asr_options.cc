#include "services/asr/core/asr_options.h"

namespace moe::asr {

void AsrCoreOptions::Describe(common::config::Schema<AsrCoreOptions>& s) {
  s.Add("max_streams", &AsrCoreOptions::max_streams, "streams at once (decoders made at start)")
      .Range(1, 256);
  s.Add("endpoint_silence", &AsrCoreOptions::endpoint_silence,
        "pause after speech that ends an utterance (default of the stream's config)")
      .Range(absl::Milliseconds(100), absl::Seconds(5));
  s.Add("partial_interval", &AsrCoreOptions::partial_interval, "audio between partials")
      .Range(absl::Milliseconds(10), absl::Seconds(5));
  s.Add("stability_window", &AsrCoreOptions::stability_window,
        "audio a partial's word must survive to be stable")
      .Range(absl::ZeroDuration(), absl::Seconds(5));
  s.Add("max_utterance", &AsrCoreOptions::max_utterance, "longest utterance before it is cut")
      .Range(absl::Seconds(1), absl::Minutes(10));
  s.Add("max_stream_audio", &AsrCoreOptions::max_stream_audio, "audio one stream may carry")
      .Range(absl::Seconds(1), absl::Hours(24));
  s.Add("max_chunk_bytes", &AsrCoreOptions::max_chunk_bytes, "largest audio chunk, bytes")
      .Range(2, 64 << 20);
  s.Add("max_grammar_bytes", &AsrCoreOptions::max_grammar_bytes, "largest JSGF grammar, bytes")
      .Range(16, 16 << 20);
  s.Add("max_keywords", &AsrCoreOptions::max_keywords, "most keywords per stream").Range(1, 65536);
  s.Add("realtime_factor_window", &AsrCoreOptions::realtime_factor_window,
        "span of moe_asr_realtime_factor")
      .Range(absl::Seconds(1), absl::Hours(1));
}

}  // namespace moe::asr
