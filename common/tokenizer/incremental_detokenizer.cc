#include "common/tokenizer/incremental_detokenizer.h"

#include <string_view>

namespace moe::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer),
      skip_special_(skip_special_tokens),
      strip_left_(tokenizer.decoder().strip_start()) {}

std::string IncrementalDetokenizer::Add(int32_t id) {
  std::string raw;
  if (!tokenizer_.AppendTokenBytes(id, first_, skip_special_, &raw)) return std::string();
  first_ = false;
  std::string_view v = raw;
  const std::string& c = tokenizer_.decoder().strip_content();
  while (strip_left_ > 0 && !v.empty() && !c.empty()) {
    if (v.substr(0, c.size()) == c) {
      v.remove_prefix(c.size());
      --strip_left_;
    } else {
      strip_left_ = 0;  // the text no longer starts with the strip character
    }
  }
  return Emit(utf8_.Feed(v));
}

std::string IncrementalDetokenizer::Emit(std::string s) {
  const int stop = tokenizer_.decoder().strip_stop();
  const std::string& c = tokenizer_.decoder().strip_content();
  if (stop > 0 && !c.empty() && !s.empty()) {
    // Hold back up to `stop` trailing strip characters: they are dropped if the stream ends here.
    s = held_ + s;
    std::string_view v = s;
    int n = 0;
    while (n < stop && v.size() >= c.size() && v.substr(v.size() - c.size()) == c) {
      v.remove_suffix(c.size());
      ++n;
    }
    held_ = s.substr(v.size());
    s.resize(v.size());
  }
  text_ += s;
  return s;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out = Emit(utf8_.Finish());
  held_.clear();
  return out;
}

}  // namespace moe::tokenizer
