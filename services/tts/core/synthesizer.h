// The speech engine behind the TTS service (DESIGN.md §2). espeak-ng implements it
// (services/tts/espeak_synthesizer.h); a neural engine (Piper, Riva) would be another. Tests use
// services/tts/testing/fake_synthesizer.h.
//
// Thread-safety: every method may be called from any thread; implementations serialise what
// their engine cannot do concurrently (espeak-ng has one global synthesizer).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "absl/status/status.h"

namespace moe::tts {

struct VoiceSettings {
  std::string voice;   // an engine voice or an alias (CheckVoice accepted it)
  float speed = 1.0f;  // relative to normal, [0.25, 4.0]
};

class SpeechSynthesizer {
 public:
  virtual ~SpeechSynthesizer() = default;

  // The rate of the PCM it produces, Hz.
  virtual int32_t sample_rate() const = 0;
  // kInvalidArgument naming the voice when it is not known.
  virtual absl::Status CheckVoice(const std::string& voice) const = 0;
  // Speaks `text` (one segment): mono s16 PCM goes to `on_audio` in chunks as the engine makes
  // them; on_audio returning false stops the synthesis (kCancelled).
  virtual absl::Status Synthesize(
      const std::string& text, const VoiceSettings& voice,
      const std::function<bool(std::span<const int16_t>)>& on_audio) = 0;
};

}  // namespace moe::tts
