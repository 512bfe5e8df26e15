// A Decoder for tests that needs no model: audio whose samples are all v (|v| >= 1000) is
// speech of the word "w<v/1000>" (3000 -> "w3"); quieter audio is silence. A new word starts
// whenever the level changes. The VAD reports speech from the first loud frame and for
// `hangover_ms` after the last one, like pocketsphinx's. EndUtterance() returns the words heard
// since StartUtterance(). Configure() accepts any spec and records it; a grammar of "bad" is
// kInvalidArgument.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/asr/core/decoder.h"

namespace moe::asr::testing {

class FakeDecoder final : public Decoder {
 public:
  explicit FakeDecoder(VadTiming timing = {.onset_ms = 0, .hangover_ms = 100}) : timing_(timing) {}

  int32_t sample_rate() const override { return 16000; }
  VadTiming vad_timing() const override { return timing_; }
  absl::Status Configure(const RecognitionSpec& spec) override {
    if (spec.mode == RecognitionMode::kGrammar && spec.grammar_jsgf == "bad") {
      return absl::InvalidArgumentError("grammar_jsgf: does not parse");
    }
    spec_ = spec;
    return absl::OkStatus();
  }
  absl::Status StartUtterance() override {
    words_.clear();
    level_ = 0;
    ++utterances_started_;
    return absl::OkStatus();
  }
  absl::Status Process(std::span<const int16_t> pcm) override {
    for (int16_t s : pcm) {
      const int level = s >= 1000 || s <= -1000 ? s / 1000 : 0;
      if (level != 0) {
        if (level != level_) words_.push_back(absl::StrCat("w", level < 0 ? -level : level));
        silent_samples_ = 0;
        in_speech_ = true;
      } else if (in_speech_ && ++silent_samples_ >= timing_.hangover_ms * 16) {
        in_speech_ = false;
      }
      level_ = level;
    }
    processed_ += static_cast<int64_t>(pcm.size());
    return absl::OkStatus();
  }
  bool InSpeech() const override { return in_speech_; }
  std::string Partial() override { return absl::StrJoin(words_, " "); }
  absl::StatusOr<std::string> EndUtterance() override {
    std::string text = absl::StrJoin(words_, " ");
    words_.clear();
    in_speech_ = false;
    return text;
  }

  const RecognitionSpec& spec() const { return spec_; }
  int64_t processed_samples() const { return processed_; }
  int utterances_started() const { return utterances_started_; }

 private:
  const VadTiming timing_;
  RecognitionSpec spec_;
  std::vector<std::string> words_;
  int level_ = 0;
  bool in_speech_ = false;
  int64_t silent_samples_ = 0;
  int64_t processed_ = 0;
  int utterances_started_ = 0;
};

}  // namespace moe::asr::testing
