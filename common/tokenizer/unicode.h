// UTF-8 helpers shared by the tokenizer: validation, lossy repair, the GPT-2 byte <-> unicode map,
// a streaming lossy UTF-8 decoder and Unicode normalization forms (ICU).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace moe::tokenizer {

// Debian's abseil has its own string_view; absl containers look up heterogeneous keys with it.
inline absl::string_view AbslView(std::string_view s) { return {s.data(), s.size()}; }

// Length in bytes of the UTF-8 sequence that starts with lead byte `b` (1 for invalid leads).
int Utf8SeqLen(unsigned char b);

// Appends the UTF-8 encoding of code point `cp` to `out`.
void AppendUtf8(uint32_t cp, std::string* out);

// Decodes the code point at `s[*pos]` (which must be valid UTF-8) and advances `*pos`.
uint32_t NextCodePoint(std::string_view s, size_t* pos);

bool IsValidUtf8(std::string_view s);

// Returns `s` with every maximal invalid subsequence replaced by U+FFFD (the WHATWG / Rust
// `from_utf8_lossy` rule). Valid input is returned unchanged.
std::string Utf8Lossy(std::string_view s);

// Streaming form of Utf8Lossy: Feed() returns the text that is complete so far and keeps an
// incomplete trailing sequence back; Finish() flushes it (as U+FFFD). For any split of a byte
// string into chunks, the concatenation of all outputs equals Utf8Lossy(whole).
class StreamingUtf8Decoder {
 public:
  std::string Feed(std::string_view bytes);
  std::string Finish();
  bool has_pending() const { return !pending_.empty(); }

 private:
  std::string pending_;
};

// GPT-2 byte-level alphabet: each byte maps to one printable code point (as UTF-8).
const std::string& ByteToUnicode(unsigned char b);
// Inverse: code point -> byte, or -1 when the code point is not in the alphabet.
int UnicodeToByte(uint32_t cp);
// Maps every byte of `s` through ByteToUnicode.
std::string ByteLevelEncode(std::string_view s);

enum class NormalForm : uint8_t { kNFC, kNFD, kNFKC, kNFKD };
// Unicode normalization of valid UTF-8 text.
absl::StatusOr<std::string> Normalize(std::string_view s, NormalForm form);
// Full Unicode lowercase (root locale), as JavaScript's toLowerCase.
std::string ToLower(std::string_view s);

// True for code points with the Unicode White_Space property.
bool IsUnicodeWhitespace(uint32_t cp);
// Trims White_Space code points at the start / end.
std::string_view TrimStart(std::string_view s);
std::string_view TrimEnd(std::string_view s);

}  // namespace moe::tokenizer
