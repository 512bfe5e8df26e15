#include "services/asr/core/stability.h"

#include <algorithm>

#include "absl/strings/str_split.h"

namespace moe::asr {

int StabilityTracker::Observe(int64_t now_ms, const std::vector<std::string>& words) {
  history_.push_back({now_ms, words});
  // Keep one entry at or before the window's start as the anchor: stability needs a hypothesis
  // that old to compare with.
  while (history_.size() >= 2 && history_[1].ms <= now_ms - window_ms_) history_.pop_front();
  if (history_.front().ms > now_ms - window_ms_) return 0;
  size_t common = words.empty() ? 0 : words.size() - 1;
  for (const Entry& e : history_) {
    size_t i = 0;
    while (i < common && i < e.words.size() && e.words[i] == words[i]) ++i;
    common = i;
  }
  return static_cast<int>(common);
}

std::vector<std::string> SplitWords(const std::string& text) {
  return absl::StrSplit(text, ' ', absl::SkipEmpty());
}

uint32_t PrefixBytes(const std::vector<std::string>& words, int n) {
  uint32_t bytes = 0;
  for (int i = 0; i < n && i < static_cast<int>(words.size()); ++i) {
    bytes += static_cast<uint32_t>(words[static_cast<size_t>(i)].size()) + (i > 0 ? 1 : 0);
  }
  return bytes;
}

}  // namespace moe::asr
