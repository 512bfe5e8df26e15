#include "common/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace moe::tokenizer {
namespace {

// A per-thread JIT stack large enough for long whitespace or letter runs.
struct ThreadMatchState {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  ThreadMatchState() {
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    if (context != nullptr && stack != nullptr) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    if (stack != nullptr) pcre2_jit_stack_free(stack);
    if (context != nullptr) pcre2_match_context_free(context);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

std::string EscapeLiteral(std::string_view s) {
  // \Q...\E with any \E inside split out.
  std::string out = "\\Q";
  size_t pos = 0;
  while (true) {
    const size_t e = s.find("\\E", pos);
    if (e == std::string_view::npos) {
      out.append(s.substr(pos));
      break;
    }
    out.append(s.substr(pos, e - pos));
    out.append("\\E\\\\E\\Q");
    pos = e + 2;
  }
  out += "\\E";
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                    PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return absl::InvalidArgumentError(absl::StrCat(
        "regex '", std::string(pattern),
        "' does not compile: ", reinterpret_cast<const char*>(message), " at offset ", offset));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter on failure
  return std::unique_ptr<Regex>(new Regex(code));
}

absl::StatusOr<std::unique_ptr<Regex>> Regex::Literal(std::string_view literal) {
  return Compile(EscapeLiteral(literal));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  while (pos <= s.size()) {
    const int rc = pcre2_match(code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, md, state.context);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH or a resource limit: no more matches
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t start = ov[0], end = ov[1];
    if (end > start) {
      out.emplace_back(start, end);
      pos = end;
    } else {
      // Empty match: step over one code point.
      if (start >= s.size()) break;
      size_t next = start + 1;
      while (next < s.size() && (static_cast<unsigned char>(s[next]) & 0xC0) == 0x80) ++next;
      pos = next;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

std::string Regex::ReplaceAll(std::string_view s, std::string_view replacement) const {
  const auto matches = FindAll(s);
  if (matches.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t prev = 0;
  for (const auto& [start, end] : matches) {
    out.append(s.substr(prev, start - prev));
    out.append(replacement);
    prev = end;
  }
  out.append(s.substr(prev));
  return out;
}

}  // namespace moe::tokenizer
