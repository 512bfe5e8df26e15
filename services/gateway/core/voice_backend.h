// The gateway's view of the speech services (DESIGN.md §2: asr, tts), as generate_backend.h is
// its view of the routers: plain types mirroring moe.asr.v1 / moe.tts.v1 without proto. The gRPC
// implementations are services/gateway/grpc_voice.h; tests use testing/fake_voice.h.
//
// Both are streams with the same contract: calls on a call object in any order from any thread
// (they are queued, in order, and bounded: a full queue fails the call with
// kResourceExhausted); the observer gets events, then exactly one OnDone() (OK after a normal
// end, kCancelled after Cancel(), the service's error otherwise: kInvalidArgument for a request
// it refuses, kUnavailable / kResourceExhausted when it cannot serve now). Observer callbacks
// for one call are serialised, on backend threads; the observer must stay alive until OnDone()
// returned (hold it in a shared_ptr).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moe::gateway {

// --- speech to text ---

struct AsrStreamConfig {
  int32_t sample_rate_hz = 16000;
  uint32_t endpoint_silence_ms = 0;  // 0 = the service's default
  bool partial_results = true;
  bool manual_endpointing = false;
  std::string language;  // "" = the service's default
};

struct AsrEvent {
  enum class Type { kPartial, kFinal, kSpeechStarted, kSpeechStopped };
  Type type = Type::kPartial;
  std::string text;
  int32_t utterance_index = 0;
  uint32_t start_ms = 0;
  uint32_t end_ms = 0;
  uint32_t stable_bytes = 0;  // partials: the leading bytes of `text` that are stable
  uint32_t finalize_ms = 0;   // finals: the service's endpoint -> final time
};

class AsrObserver {
 public:
  virtual ~AsrObserver() = default;
  virtual void OnEvent(AsrEvent event) = 0;
  virtual void OnDone(absl::Status status) = 0;
};

class AsrCall {
 public:
  virtual ~AsrCall() = default;
  // Mono s16le PCM at the config's rate (an even number of bytes).
  virtual void SendAudio(std::string pcm_s16le) = 0;
  // End the current utterance now / drop it (the realtime API's commit and clear).
  virtual void Finalize() = 0;
  virtual void Discard() = 0;
  // No more audio: the service sends the last final and ends the stream.
  virtual void CloseSend() = 0;
  virtual void Cancel() = 0;
};

class AsrClient {
 public:
  virtual ~AsrClient() = default;
  virtual std::unique_ptr<AsrCall> Transcribe(const AsrStreamConfig& config,
                                              std::shared_ptr<AsrObserver> observer) = 0;
  // Whether an ASR service is configured at all (voice.asr).
  virtual bool configured() const = 0;
};

// --- text to speech ---

struct TtsStreamConfig {
  std::string voice;  // "" = the service's default
  int32_t sample_rate_hz = 24000;
  float speed = 1.0f;
};

struct TtsAudio {
  std::string pcm_s16le;
  int32_t sample_rate_hz = 0;
  int32_t segment_index = 0;
  bool end_of_segment = false;
  std::string text;                 // a segment's first chunk: its text
  uint32_t segment_latency_ms = 0;  // a segment's first chunk: the service's latency to it
};

class TtsObserver {
 public:
  virtual ~TtsObserver() = default;
  virtual void OnAudio(TtsAudio audio) = 0;
  virtual void OnDone(absl::Status status) = 0;
};

class TtsCall {
 public:
  virtual ~TtsCall() = default;
  virtual void SendText(std::string text, bool flush = false) = 0;
  // The text is complete: the rest is spoken, then the stream ends.
  virtual void CloseSend() = 0;
  virtual void Cancel() = 0;
};

class TtsClient {
 public:
  virtual ~TtsClient() = default;
  virtual std::unique_ptr<TtsCall> Synthesize(const TtsStreamConfig& config,
                                              std::shared_ptr<TtsObserver> observer) = 0;
  // Whether a TTS service is configured at all (voice.tts).
  virtual bool configured() const = 0;
};

}  // namespace moe::gateway
