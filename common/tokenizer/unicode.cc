#include "common/tokenizer/unicode.h"

#include <array>
#include <memory>

#include "absl/status/status.h"
#include "unicode/locid.h"
#include "unicode/normalizer2.h"
#include "unicode/unistr.h"

namespace moe::tokenizer {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Decodes `s` into `out`, replacing maximal invalid subsequences by U+FFFD. When `final` is false,
// a trailing sequence that is a valid prefix of a longer one is left unconsumed. Returns the number
// of bytes consumed.
size_t DecodeLossy(std::string_view s, std::string* out, bool final) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      // Fast path over an ASCII run.
      size_t j = i + 1;
      while (j < n && static_cast<unsigned char>(s[j]) < 0x80) ++j;
      out->append(s.data() + i, j - i);
      i = j;
      continue;
    }
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t j = i + 1;
    int got = 0;
    bool bad = false;
    while (got < need) {
      if (j >= n) break;
      const auto c = static_cast<unsigned char>(s[j]);
      if (c < lo || c > hi) {
        bad = true;
        break;
      }
      lo = 0x80;
      hi = 0xBF;
      ++j;
      ++got;
    }
    if (got == need) {
      out->append(s.data() + i, j - i);
    } else if (!bad && !final) {
      return i;  // incomplete tail: keep it back
    } else {
      out->append(kReplacement);
    }
    i = j;
  }
  return n;
}

std::array<std::string, 256> BuildByteTable() {
  std::array<int, 256> cp{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  int n = 0;
  for (int b = 0; b < 256; ++b) cp[b] = direct[b] ? b : 256 + n++;
  std::array<std::string, 256> table;
  for (int b = 0; b < 256; ++b) AppendUtf8(static_cast<uint32_t>(cp[b]), &table[b]);
  return table;
}

const std::array<std::string, 256>& ByteTable() {
  static const auto* table = new std::array<std::string, 256>(BuildByteTable());
  return *table;
}

std::string FromUnicodeString(const icu::UnicodeString& u) {
  std::string out;
  u.toUTF8String(out);
  return out;
}

}  // namespace

int Utf8SeqLen(unsigned char b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 1;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t NextCodePoint(std::string_view s, size_t* pos) {
  const auto b = static_cast<unsigned char>(s[*pos]);
  const int len = Utf8SeqLen(b);
  uint32_t cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len && *pos + k < s.size(); ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[*pos + k]) & 0x3F);
  }
  *pos += len;
  return cp;
}

bool IsValidUtf8(std::string_view s) {
  std::string scratch;
  scratch.reserve(s.size());
  DecodeLossy(s, &scratch, /*final=*/true);
  return scratch.size() == s.size() && scratch == s;
}

std::string Utf8Lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  DecodeLossy(s, &out, /*final=*/true);
  return out;
}

std::string StreamingUtf8Decoder::Feed(std::string_view bytes) {
  pending_.append(bytes);
  std::string out;
  const size_t used = DecodeLossy(pending_, &out, /*final=*/false);
  pending_.erase(0, used);
  return out;
}

std::string StreamingUtf8Decoder::Finish() {
  std::string out;
  DecodeLossy(pending_, &out, /*final=*/true);
  pending_.clear();
  return out;
}

const std::string& ByteToUnicode(unsigned char b) { return ByteTable()[b]; }

int UnicodeToByte(uint32_t cp) {
  static const auto* inverse = [] {
    auto* m = new std::array<int16_t, 512>();
    m->fill(-1);
    for (int b = 0; b < 256; ++b) {
      size_t pos = 0;
      (*m)[NextCodePoint(ByteTable()[b], &pos)] = static_cast<int16_t>(b);
    }
    return m;
  }();
  return cp < inverse->size() ? (*inverse)[cp] : -1;
}

std::string ByteLevelEncode(std::string_view s) {
  std::string out;
  out.reserve(s.size() * 2);
  const auto& table = ByteTable();
  for (char c : s) out += table[static_cast<unsigned char>(c)];
  return out;
}

absl::StatusOr<std::string> Normalize(std::string_view s, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* norm = nullptr;
  switch (form) {
    case NormalForm::kNFC:
      norm = icu::Normalizer2::getNFCInstance(status);
      break;
    case NormalForm::kNFD:
      norm = icu::Normalizer2::getNFDInstance(status);
      break;
    case NormalForm::kNFKC:
      norm = icu::Normalizer2::getNFKCInstance(status);
      break;
    case NormalForm::kNFKD:
      norm = icu::Normalizer2::getNFKDInstance(status);
      break;
  }
  if (U_FAILURE(status) || norm == nullptr) {
    return absl::InternalError(std::string("ICU normalizer unavailable: ") + u_errorName(status));
  }
  const icu::UnicodeString in =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  // Fast path: most text is already normalized.
  if (norm->isNormalized(in, status) && U_SUCCESS(status)) return std::string(s);
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = norm->normalize(in, status);
  if (U_FAILURE(status)) {
    return absl::InternalError(std::string("ICU normalize failed: ") + u_errorName(status));
  }
  return FromUnicodeString(out);
}

std::string ToLower(std::string_view s) {
  icu::UnicodeString u =
      icu::UnicodeString::fromUTF8(icu::StringPiece(s.data(), static_cast<int32_t>(s.size())));
  u.toLower(icu::Locale::getRoot());
  return FromUnicodeString(u);
}

bool IsUnicodeWhitespace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

std::string_view TrimStart(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    size_t next = pos;
    if (!IsUnicodeWhitespace(NextCodePoint(s, &next))) break;
    pos = next;
  }
  return s.substr(pos);
}

std::string_view TrimEnd(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t next = start;
    if (!IsUnicodeWhitespace(NextCodePoint(s, &next))) break;
    end = start;
  }
  return s.substr(0, end);
}

}  // namespace moe::tokenizer
