#include "services/asr/testing/wer.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/file.h"

namespace moe::asr::testing {

std::vector<std::string> NormalizeWords(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view w : absl::StrSplit(text, absl::ByAnyChar(" \t\n"), absl::SkipEmpty())) {
    if (w == "<s>" || w == "</s>" || (w.front() == '(' && w.back() == ')')) continue;
    std::string clean;
    for (char c : w) {
      if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '\'') {
        clean.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
      }
    }
    if (!clean.empty()) out.push_back(clean);
  }
  return out;
}

WerCount CountWordErrors(const std::string& reference, const std::string& hypothesis) {
  const std::vector<std::string> r = NormalizeWords(reference), h = NormalizeWords(hypothesis);
  std::vector<int> prev(h.size() + 1), cur(h.size() + 1);
  for (size_t j = 0; j <= h.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= r.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= h.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r[i - 1] != h[j - 1])});
    }
    std::swap(prev, cur);
  }
  return {.errors = prev[h.size()], .reference_words = static_cast<int>(r.size())};
}

absl::StatusOr<std::vector<Utterance>> ReadTestCorpus(const std::string& dir,
                                                      const std::string& transcription) {
  absl::StatusOr<std::string> text =
      common::ReadFile((std::filesystem::path(dir) / transcription).string());
  if (!text.ok()) return text.status();
  std::vector<Utterance> out;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipWhitespace())) {
    const size_t open = line.rfind('(');
    const size_t close = line.rfind(')');
    if (open == absl::string_view::npos || close == absl::string_view::npos || close < open) {
      return absl::InvalidArgumentError(absl::StrCat(transcription, ": no (id) in '", line, "'"));
    }
    const std::string id(line.substr(open + 1, close - open - 1));
    out.push_back(
        {(std::filesystem::path(dir) / (id + ".wav")).string(), std::string(line.substr(0, open))});
  }
  return out;
}

}  // namespace moe::asr::testing
