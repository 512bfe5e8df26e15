// espeak-ng (Debian's libespeak-ng1) behind the SpeechSynthesizer interface: 22050 Hz, its
// streaming synth callback, 100+ languages and variants ("en-us", "en+f3"), and aliases
// (OpenAI's voice names, so clients that send `alloy` get a voice). espeak-ng keeps one global
// synthesizer per process: this class is created once per process and serialises synthesis.
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/config/schema.h"
#include "services/tts/core/synthesizer.h"

namespace moe::tts {

struct EspeakOptions {
  // "alias=voice" pairs. The defaults give OpenAI's voice names distinct espeak-ng variants.
  std::vector<std::string> voice_aliases = {
      "alloy=en-us",    "ash=en-us+m3",   "ballad=en+m4",  "coral=en-us+f3", "echo=en-us+m7",
      "fable=en",       "onyx=en-us+m1",  "nova=en-us+f4", "sage=en-us+f2",  "shimmer=en-us+f5",
      "verse=en-us+m2", "marin=en-us+f1", "cedar=en-us+m5"};
  // Words per minute at speed 1.0 (espeak-ng's default 175); speed scales it within espeak's
  // range of 80-450.
  int32_t words_per_minute = 175;
  // espeak-ng's data directory; "" = its built-in default
  // (/usr/lib/x86_64-linux-gnu/espeak-ng-data).
  std::string data_dir;

  static void Describe(common::config::Schema<EspeakOptions>& s);
  absl::Status Validate() const;
};

class EspeakSynthesizer final : public SpeechSynthesizer {
 public:
  // Initialises espeak-ng (once per process: a second instance is kFailedPrecondition).
  // kInvalidArgument for a malformed alias or one naming an unknown voice; kInternal when
  // espeak-ng cannot start (no data directory).
  static absl::StatusOr<std::unique_ptr<EspeakSynthesizer>> Create(const EspeakOptions& options);
  ~EspeakSynthesizer() override;

  // SpeechSynthesizer
  int32_t sample_rate() const override { return rate_; }
  absl::Status CheckVoice(const std::string& voice) const override;
  absl::Status Synthesize(const std::string& text, const VoiceSettings& voice,
                          const std::function<bool(std::span<const int16_t>)>& on_audio) override;

 private:
  EspeakSynthesizer(const EspeakOptions& options, int32_t rate,
                    std::vector<std::pair<std::string, std::string>> aliases);
  // The espeak voice a name stands for (an alias resolved), "" when unknown.
  std::string Resolve(const std::string& voice) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const EspeakOptions options_;
  const int32_t rate_;
  const std::vector<std::pair<std::string, std::string>> aliases_;

  mutable absl::Mutex mu_;  // espeak-ng's global state
};

}  // namespace moe::tts
