// A compiled PCRE2 regular expression over UTF-8 with Unicode properties (UTF + UCP), JIT-compiled
// when the platform allows. Used for the Split pre-tokenizer and Replace normalizers, whose
// patterns come from tokenizer.json (written for Oniguruma; the constructs real files use -- \p{L},
// \p{N},
// (?i:...), lookahead, {m,n} -- mean the same in PCRE2).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::tokenizer {

class Regex {
 public:
  // Compiles `pattern`; an error names the pattern and PCRE2's message and offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern);
  // A regex that matches `literal` exactly.
  static absl::StatusOr<std::unique_ptr<Regex>> Literal(std::string_view literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The [start, end) byte ranges of all non-overlapping, non-empty matches in `s`, left to right.
  // `s` must be valid UTF-8. Thread-safe.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view s) const;

  // `s` with every match replaced by `replacement` (taken literally).
  std::string ReplaceAll(std::string_view s, std::string_view replacement) const;

 private:
  explicit Regex(void* code) : code_(code) {}
  void* code_;  // pcre2_code_8*
};

}  // namespace moe::tokenizer
