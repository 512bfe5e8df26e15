#include "services/tts/core/text_segmenter.h"

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"

namespace moe::tts {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool IsClosing(char c) { return c == '"' || c == '\'' || c == ')' || c == ']' || c == '}'; }
bool IsContinuation(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

}  // namespace

size_t TextSegmenter::FindCut() const {
  const std::string& b = buffer_;
  const bool first = emitted_ == 0;
  const size_t cap = static_cast<size_t>(first ? options_.first_max_chars : options_.max_chars);
  for (size_t i = 0; i < b.size() && i < cap; ++i) {
    const char c = b[i];
    if (c == '\n') return i + 1;
    const bool sentence = c == '.' || c == '!' || c == '?';
    const bool clause = first && (c == ',' || c == ';' || c == ':') &&
                        i + 1 >= static_cast<size_t>(options_.first_min_chars);
    if (!sentence && !clause) continue;
    size_t j = i + 1;
    while (j < b.size() && IsClosing(b[j])) ++j;
    if (j < b.size() && IsSpace(b[j])) return j;
  }
  if (b.size() < cap) return std::string::npos;
  // The cap: cut after the last space before it, else at a character boundary.
  size_t cut = cap;
  while (cut > 0 && !IsSpace(b[cut - 1])) --cut;
  if (cut == 0) {
    cut = cap;
    while (cut > 0 && cut < b.size() && IsContinuation(b[cut])) --cut;
  }
  return cut;
}

void TextSegmenter::Emit(size_t end, std::vector<std::string>* out) {
  const absl::string_view seg =
      absl::StripAsciiWhitespace(absl::string_view(buffer_).substr(0, end));
  if (!seg.empty()) {
    out->emplace_back(seg);
    ++emitted_;
  }
  buffer_.erase(0, end);
}

void TextSegmenter::Append(std::string_view text, std::vector<std::string>* out) {
  buffer_.append(text);
  // Leading white space never starts a segment (nor counts toward its cap).
  size_t lead = 0;
  while (lead < buffer_.size() && IsSpace(buffer_[lead])) ++lead;
  buffer_.erase(0, lead);
  for (size_t cut = FindCut(); cut != std::string::npos; cut = FindCut()) {
    Emit(cut, out);
    lead = 0;
    while (lead < buffer_.size() && IsSpace(buffer_[lead])) ++lead;
    buffer_.erase(0, lead);
  }
}

void TextSegmenter::Flush(std::vector<std::string>* out) { Emit(buffer_.size(), out); }

}  // namespace moe::tts
