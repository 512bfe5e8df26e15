// Word error rate: (substitutions + deletions + insertions) / reference words, by word-level
// edit distance after normalisation (lower case, punctuation dropped, pocketsphinx's <s> </s>
// markers and (utterance-id) suffixes of its transcription files removed). For the ASR tests
// and `moe bench voice`.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::asr::testing {

std::vector<std::string> NormalizeWords(const std::string& text);

struct WerCount {
  int errors = 0;
  int reference_words = 0;
  double rate() const { return reference_words > 0 ? double(errors) / reference_words : 0; }
};
WerCount CountWordErrors(const std::string& reference, const std::string& hypothesis);

// A pocketsphinx-testdata corpus: (wav path, reference transcript) pairs in file order.
struct Utterance {
  std::string wav_path;
  std::string reference;
};
// `dir` holds WAVs and a transcription file whose lines end "(<id>)", the WAV being
// `dir/<id>.wav` (librivox: "transcription", cards: "cards.transcription").
absl::StatusOr<std::vector<Utterance>> ReadTestCorpus(const std::string& dir,
                                                      const std::string& transcription);

}  // namespace moe::asr::testing
