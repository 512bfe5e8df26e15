// OpenAI's audio endpoints over the asr and tts services:
//
//   POST /v1/audio/transcriptions  multipart upload (file, model, response_format json | text |
//        verbose_json, language, prompt and temperature accepted and ignored). The file is WAV
//        (PCM 8-32 bit or float, any rate and channel count): decoded, mixed to mono,
//        resampled to 16 kHz, streamed to asr; the utterances' finals are the text (verbose_json:
//        one segment per utterance, with its times).
//   POST /v1/audio/speech  JSON (model, input, voice, speed 0.25-4, response_format mp3 (the
//        default) | opus | flac | wav | pcm, stream_format audio | sse, instructions ignored):
//        tts at 24 kHz, encoded as it is synthesized and streamed (chunked; sse: speech.audio.delta
//        events).
//
// Bad input is a 400 naming the parameter (a non-WAV or truncated file, an unknown model or
// format, aac, input too long, speed out of range, an unknown voice); services that are down or
// full are 503 + Retry-After. Uploads are bounded by http.max_upload_bytes (413) and
// voice.max_transcription_audio (400).
//
// Thread-safety: Handle* may be called concurrently from any thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "services/gateway/core/gateway_options.h"
#include "services/gateway/core/http_types.h"
#include "services/gateway/core/voice_backend.h"
#include "services/gateway/core/voice_metrics.h"

namespace moe::gateway {

class AudioEndpoints {
 public:
  // Everything borrowed must outlive the endpoints and their requests. `on_done` runs once per
  // request that the handlers returned a CancelFn for, when it ends (frees its in-flight slot).
  AudioEndpoints(const VoiceOptions& options, int retry_after_s, AsrClient& asr, TtsClient& tts,
                 VoiceMetrics& metrics);

  CancelFn Transcribe(const HttpRequest& request, const std::shared_ptr<ResponseWriter>& writer,
                      std::function<void()> on_done);
  CancelFn Speak(const HttpRequest& request, const std::shared_ptr<ResponseWriter>& writer,
                 std::function<void()> on_done);

 private:
  const VoiceOptions options_;
  const int retry_after_s_;
  AsrClient& asr_;
  TtsClient& tts_;
  VoiceMetrics& metrics_;
};

}  // namespace moe::gateway
