#include "services/asr/core/endpointer.h"

#include <algorithm>

namespace moe::asr {

Endpointer::Event Endpointer::Update(int64_t now_ms, bool in_speech) {
  switch (state_) {
    case State::kIdle:
      if (!in_speech) return Event::kNone;
      start_ms_ = std::max<int64_t>(0, now_ms - options_.onset_ms);
      end_ms_ = now_ms;
      state_ = State::kSpeech;
      return Event::kSpeechStarted;
    case State::kSpeech:
      if (in_speech) {
        end_ms_ = now_ms;
      } else {
        end_ms_ = std::max(start_ms_, now_ms - options_.hangover_ms);
        state_ = State::kTrailing;
      }
      break;
    case State::kTrailing:
      if (in_speech) {
        end_ms_ = now_ms;
        state_ = State::kSpeech;
      }
      break;
  }
  if (now_ms - start_ms_ >= options_.max_utterance_ms) {
    if (state_ == State::kSpeech) end_ms_ = now_ms;
    return Event::kEndpoint;
  }
  if (state_ == State::kTrailing && !options_.manual && now_ms - end_ms_ >= options_.silence_ms) {
    return Event::kEndpoint;
  }
  return Event::kNone;
}

}  // namespace moe::asr
