// Endpointing from the engine's voice-activity flag (pocketsphinx 0.8 has no endpointer API):
// an utterance starts when the VAD turns on and ends `silence` after the speech ended, where the
// end of speech is when the VAD turned off minus its hang-over. A pause shorter than `silence`
// keeps the utterance going. An utterance longer than `max_utterance` is ended where it is (so
// that a stream that never pauses still decodes in bounded memory).
//
// All times are audio times in milliseconds since the stream started (never wall time): the
// same audio gives the same endpoints whatever the machine's speed.
//
// Thread-compatible.
#pragma once

#include <cstdint>

namespace moe::asr {

struct EndpointerOptions {
  int32_t silence_ms = 300;   // pause after speech that ends an utterance
  int32_t onset_ms = 100;     // the VAD's detection delay (speech started that long earlier)
  int32_t hangover_ms = 300;  // the VAD's hang-over
  int32_t max_utterance_ms = 30000;
  bool manual = false;  // never end on silence (only max_utterance_ms)
};

class Endpointer {
 public:
  enum class Event { kNone, kSpeechStarted, kEndpoint };

  explicit Endpointer(const EndpointerOptions& options) : options_(options) {}

  // The VAD's flag after the audio up to `now_ms`. Returns what happened then; after kEndpoint
  // call Reset() once the utterance is finished.
  Event Update(int64_t now_ms, bool in_speech);
  // Forgets the utterance (after its final, a FINALIZE or a DISCARD).
  void Reset() { state_ = State::kIdle; }

  bool in_utterance() const { return state_ != State::kIdle; }
  int64_t speech_start_ms() const { return start_ms_; }
  int64_t speech_end_ms() const { return end_ms_; }

 private:
  enum class State { kIdle, kSpeech, kTrailing };

  const EndpointerOptions options_;
  State state_ = State::kIdle;
  int64_t start_ms_ = 0;
  int64_t end_ms_ = 0;
};

}  // namespace moe::asr
