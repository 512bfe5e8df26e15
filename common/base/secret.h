// Secrets compared without being kept: API keys and bearer tokens are stored as their SHA-256
// and a presented secret is hashed and compared in constant time, so neither a key file nor a
// process's memory holds a usable key, and timing says nothing about how much of a guess was
// right. (A SHA-256 of a high-entropy key needs no salt or slow hash: it cannot be guessed.)
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace moe::common {

struct SecretDigest {
  std::array<uint8_t, 32> bytes{};
};

// SHA-256 of `secret`.
SecretDigest DigestOf(std::string_view secret);

// Constant time in the contents (both are 32 bytes).
bool DigestEquals(const SecretDigest& a, const SecretDigest& b);

// "sha256:<64 lowercase hex>", the at-rest form in key files.
std::string FormatDigest(const SecretDigest& digest);
// Parses FormatDigest's form (hex in either case). kInvalidArgument otherwise; the message never
// echoes the input (it may be a plaintext key pasted by mistake).
absl::StatusOr<SecretDigest> ParseDigest(std::string_view text);

}  // namespace moe::common
