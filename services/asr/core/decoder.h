// The speech recognition engine behind the ASR service (DESIGN.md §2): one Decoder decodes one
// stream at a time. pocketsphinx implements it (services/asr/pocketsphinx_decoder.h); a
// Whisper- or Riva-class engine would be another implementation (decoding windows of audio
// instead of frames, its own VAD or none: InSpeech() may then be an energy detector). Tests use
// services/asr/testing/fake_decoder.h.
//
// Thread-compatible: a decoder is used by one stream (one thread at a time); DecoderPool hands
// them out.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace moe::asr {

enum class RecognitionMode { kDictation, kGrammar, kKeywords };

struct RecognitionSpec {
  RecognitionMode mode = RecognitionMode::kDictation;
  std::string grammar_jsgf;           // kGrammar
  std::vector<std::string> keywords;  // kKeywords
};

// What the engine's voice-activity detector does with time, for the endpointer.
struct VadTiming {
  int32_t onset_ms = 100;     // speech is reported this long after it starts
  int32_t hangover_ms = 300;  // and reported ended this long after its last voiced frame
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Mono s16 at this rate only (the stream resamples).
  virtual int32_t sample_rate() const = 0;
  virtual VadTiming vad_timing() const = 0;

  // Selects what is recognised from the next StartUtterance() on. kInvalidArgument for a
  // grammar that does not parse or a keyword with a word the engine does not know.
  virtual absl::Status Configure(const RecognitionSpec& spec) = 0;
  virtual absl::Status StartUtterance() = 0;
  // Decodes more audio of the current utterance.
  virtual absl::Status Process(std::span<const int16_t> pcm) = 0;
  // The engine's VAD after the audio processed so far.
  virtual bool InSpeech() const = 0;
  // The best hypothesis so far (words separated by single spaces; "" for none).
  virtual std::string Partial() = 0;
  // Ends the utterance and returns its final transcript.
  virtual absl::StatusOr<std::string> EndUtterance() = 0;

 protected:
  Decoder() = default;
};

}  // namespace moe::asr
