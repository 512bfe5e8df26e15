#include "common/kv/block_hash.h"

#include <xxhash.h>

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/check.h"

namespace moe::kv {
namespace {

constexpr std::string_view kRootTag = "moe.kv.v2";

void AppendU32Le(std::string* out, uint32_t v) {
  char b[4] = {static_cast<char>(v & 0xff), static_cast<char>((v >> 8) & 0xff),
               static_cast<char>((v >> 16) & 0xff), static_cast<char>((v >> 24) & 0xff)};
  out->append(b, 4);
}

void AppendLengthPrefixed(std::string* out, std::string_view s) {
  AppendU32Le(out, static_cast<uint32_t>(s.size()));
  out->append(s);
}

BlockHash FromXxh(XXH128_hash_t h) { return BlockHash{h.low64, h.high64}; }

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::array<uint8_t, 16> BlockHash::CanonicalBytes() const {
  std::array<uint8_t, 16> out;
  for (int i = 0; i < 8; ++i) {
    out[i] = static_cast<uint8_t>(hi >> (56 - 8 * i));
    out[8 + i] = static_cast<uint8_t>(lo >> (56 - 8 * i));
  }
  return out;
}

std::string BlockHash::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  const std::array<uint8_t, 16> bytes = CanonicalBytes();
  for (int i = 0; i < 16; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xf];
  }
  return out;
}

absl::StatusOr<BlockHash> BlockHash::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return absl::InvalidArgumentError(
        absl::StrCat("block hash must be 32 hex digits, got ", hex.size(), " characters"));
  }
  BlockHash h;
  for (int i = 0; i < 32; ++i) {
    const int d = HexDigit(hex[i]);
    if (d < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("not a hex digit in block hash: ", std::string(hex)));
    uint64_t& word = i < 16 ? h.hi : h.lo;
    word = (word << 4) | static_cast<uint64_t>(d);
  }
  return h;
}

std::string SerializeRootKey(const BlockHashRootKey& key) {
  std::string out(kRootTag);
  AppendLengthPrefixed(&out, key.model_id);
  AppendLengthPrefixed(&out, key.checkpoint_fingerprint);
  AppendU32Le(&out, static_cast<uint32_t>(key.block_size));
  AppendLengthPrefixed(&out, common::DTypeName(key.kv_dtype));
  AppendLengthPrefixed(&out, key.numerics);
  AppendLengthPrefixed(&out, key.cache_salt);
  return out;
}

std::string NumericsSetting(std::string_view activations, std::string_view kv_fidelity,
                            std::string_view weights) {
  std::string out = "activations=";
  out.append(activations);
  out.append(";kv=");
  out.append(kv_fidelity);
  if (weights != "checkpoint") {
    out.append(";weights=");
    out.append(weights);
  }
  return out;
}

BlockHash RootHash(const BlockHashRootKey& key) {
  const std::string bytes = SerializeRootKey(key);
  return FromXxh(XXH3_128bits(bytes.data(), bytes.size()));
}

BlockHash HashBlock(const BlockHash& parent, absl::Span<const int32_t> token_ids) {
  // One contiguous buffer and the one-shot XXH3 (faster than streaming for ~80-byte inputs); it
  // lives on the stack for blocks of up to 64 tokens.
  constexpr size_t kInlineTokens = 64;
  const size_t size = 16 + 4 * token_ids.size();
  uint8_t inline_buf[16 + 4 * kInlineTokens];
  std::vector<uint8_t> heap_buf;
  uint8_t* buf = inline_buf;
  if (token_ids.size() > kInlineTokens) {
    heap_buf.resize(size);
    buf = heap_buf.data();
  }
  const std::array<uint8_t, 16> parent_bytes = parent.CanonicalBytes();
  std::memcpy(buf, parent_bytes.data(), parent_bytes.size());
  uint8_t* p = buf + 16;
  for (int32_t t : token_ids) {
    const uint32_t v = static_cast<uint32_t>(t);
    *p++ = static_cast<uint8_t>(v);
    *p++ = static_cast<uint8_t>(v >> 8);
    *p++ = static_cast<uint8_t>(v >> 16);
    *p++ = static_cast<uint8_t>(v >> 24);
  }
  return FromXxh(XXH3_128bits(buf, size));
}

std::vector<BlockHash> HashFullBlocks(const BlockHash& root, absl::Span<const int32_t> token_ids,
                                      int32_t block_size) {
  MOE_CHECK(block_size > 0);
  const size_t num_full = token_ids.size() / static_cast<size_t>(block_size);
  std::vector<BlockHash> out;
  out.reserve(num_full);
  BlockHash parent = root;
  for (size_t i = 0; i < num_full; ++i) {
    parent = HashBlock(parent, token_ids.subspan(i * block_size, block_size));
    out.push_back(parent);
  }
  return out;
}

}  // namespace moe::kv
