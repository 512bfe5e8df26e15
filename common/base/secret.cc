#include "common/base/secret.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "openssl/crypto.h"
#include "openssl/sha.h"

namespace moe::common {

SecretDigest DigestOf(std::string_view secret) {
  SecretDigest d;
  SHA256(reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), d.bytes.data());
  return d;
}

bool DigestEquals(const SecretDigest& a, const SecretDigest& b) {
  return CRYPTO_memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0;
}

std::string FormatDigest(const SecretDigest& digest) {
  return "sha256:" + absl::BytesToHexString(absl::string_view(
                         reinterpret_cast<const char*>(digest.bytes.data()), digest.bytes.size()));
}

absl::StatusOr<SecretDigest> ParseDigest(std::string_view text) {
  constexpr std::string_view kPrefix = "sha256:";
  if (!absl::StartsWith(absl::string_view(text.data(), text.size()), "sha256:") ||
      text.size() != kPrefix.size() + 64) {
    return absl::InvalidArgumentError("expected \"sha256:\" and 64 hex digits");
  }
  std::string_view hex = text.substr(kPrefix.size());
  for (char c : hex) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) {
      return absl::InvalidArgumentError("expected \"sha256:\" and 64 hex digits");
    }
  }
  const std::string raw = absl::HexStringToBytes(absl::string_view(hex.data(), hex.size()));
  SecretDigest d;
  std::copy(raw.begin(), raw.end(), d.bytes.begin());
  return d;
}

}  // namespace moe::common
