#include "services/gateway/core/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace moe::gateway {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Result StopMatcher::Add(std::string_view text) {
  Result result;
  if (stopped_) return result;
  pending_.append(text);
  if (stops_.empty()) {
    result.text = std::move(pending_);
    pending_.clear();
    return result;
  }
  // The earliest match wins; among matches at the same position, the longest.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos == std::string::npos) continue;
    if (pos < best || (pos == best && s.size() > best_stop->size())) {
      best = pos;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    stopped_ = true;
    matched_ = *best_stop;
    result.stopped = true;
    result.text = pending_.substr(0, include_stop_ ? best + best_stop->size() : best);
    pending_.clear();
    return result;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string. pending_ never
  // contains a whole stop string here, so a suffix of length < max stop length suffices.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (std::string_view(pending_).substr(pending_.size() - len) ==
          std::string_view(s).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  result.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return result;
}

std::string StopMatcher::Flush() {
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace moe::gateway
