// Which leading words of a partial hypothesis are stable: the words every hypothesis of the
// last `window_ms` of audio agreed on, never counting the newest word (it is still being
// heard). The voice pipeline prefills the stable part of what the user says while they are
// still speaking (DESIGN.md §1), so a word counts only once it survived a window of revisions.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace moe::asr {

class StabilityTracker {
 public:
  explicit StabilityTracker(int32_t window_ms) : window_ms_(window_ms) {}

  // The hypothesis after the audio up to `now_ms`; returns how many of its leading words are
  // stable.
  int Observe(int64_t now_ms, const std::vector<std::string>& words);
  void Reset() { history_.clear(); }

 private:
  struct Entry {
    int64_t ms;
    std::vector<std::string> words;
  };
  const int32_t window_ms_;
  std::deque<Entry> history_;  // oldest first; the first one is at or before now - window
};

// Splits on spaces (engine output is single-spaced words).
std::vector<std::string> SplitWords(const std::string& text);
// Bytes of `text` taken by its first `n` words (without the space after them).
uint32_t PrefixBytes(const std::vector<std::string>& words, int n);

}  // namespace moe::asr
