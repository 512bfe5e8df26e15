// A SpeechSynthesizer for tests: 16 kHz, each byte of text becomes 10 ms of samples equal to the
// byte's value (so tests can read the text back out of the audio), delivered in chunks of
// 20 ms. Voices "a" and "b" exist; `synthesized()` lists the segments it was given.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "services/tts/core/synthesizer.h"

namespace moe::tts::testing {

class FakeSynthesizer final : public SpeechSynthesizer {
 public:
  int32_t sample_rate() const override { return 16000; }
  absl::Status CheckVoice(const std::string& voice) const override {
    if (voice == "a" || voice == "b") return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("voice: '", voice, "' is not known"));
  }
  absl::Status Synthesize(const std::string& text, const VoiceSettings& voice,
                          const std::function<bool(std::span<const int16_t>)>& on_audio) override {
    {
      absl::MutexLock lock(&mu_);
      synthesized_.push_back(absl::StrCat(voice.voice, ":", text));
    }
    std::vector<int16_t> chunk;
    for (char c : text) {
      chunk.insert(chunk.end(), 160, static_cast<int16_t>(static_cast<unsigned char>(c)));
      if (chunk.size() >= 320) {
        if (!on_audio(chunk)) return absl::CancelledError("stopped");
        chunk.clear();
      }
    }
    if (!chunk.empty() && !on_audio(chunk)) return absl::CancelledError("stopped");
    return absl::OkStatus();
  }
  std::vector<std::string> synthesized() const {
    absl::MutexLock lock(&mu_);
    return synthesized_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> synthesized_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::tts::testing
