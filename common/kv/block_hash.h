// KV block identity (DESIGN.md §3): a hash chain of XXH3-128 digests.
//
// Every full block of block_size tokens is named by
//
//   hash(block i) = XXH3_128( parent_bytes ‖ u32le(token_0) ‖ ... ‖ u32le(token_{bs-1}) )
//
// where parent_bytes are the 16 canonical bytes (see below) of hash(block i-1), and for block 0
// the parent is the *root* hash of the cache namespace:
//
//   root = XXH3_128( "moe.kv.v2"                               9 ASCII bytes, no terminator
//                  ‖ u32le(len(model_id))   ‖ model_id          UTF-8 bytes as given
//                  ‖ u32le(len(fingerprint)) ‖ fingerprint      checkpoint fingerprint (below)
//                  ‖ u32le(block_size)
//                  ‖ u32le(len(dtype_name)) ‖ dtype_name        "f32" | "bf16" | "f16"
//                  ‖ u32le(len(numerics))   ‖ numerics          the numerics setting (below)
//                  ‖ u32le(len(cache_salt)) ‖ cache_salt )      bytes as given ("" = no salt)
//
// Blocks outlive processes in the kv-store's L2/L3 tiers, so the root names exactly what
// computed them: `fingerprint` is common/model/checkpoint_fingerprint.h's 32 hex digits for the
// checkpoint's files (another checkpoint under the same model id never matches), and `numerics`
// is NumericsSetting(): the activation mode and the KV fidelity (exact, or the opt-in lossy int8
// mode of the lower tiers), so a block computed or stored in another numerics mode never matches.
//
// XXH3_128 is XXH3_128bits() with seed 0 and the default secret (libxxhash >= 0.8). Token ids are
// written as little-endian u32 (a negative int32 id is written as its two's-complement bits).
//
// Canonical bytes and hex: a BlockHash is {lo, hi} = XXH128_hash_t{low64, high64}. Its canonical
// form is 16 bytes, hi big-endian then lo big-endian (XXH128_canonicalFromHash); ToHex() prints
// those bytes as 32 lowercase hex digits, the same string `xxh128sum` prints. The chain feeds the
// parent in this canonical form, so the hex string of a parent, decoded, is exactly the prefix of
// its child's hash input.
//
// This identity is shared by the router's L1 cache, the kv-store's L2/L3 tiers and the gateway's
// prefix-affinity routing: changing any byte above changes every cache key in the cluster, so the
// version tag "moe.kv.v2" must be bumped with it (v1 had no fingerprint and no numerics).
//
// Thread-safety: all functions are pure and thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/tensor/dtype.h"

namespace moe::kv {

// The 128-bit identity of a KV block (or of a cache namespace root). Plain value type.
struct BlockHash {
  uint64_t lo = 0;
  uint64_t hi = 0;

  friend bool operator==(const BlockHash&, const BlockHash&) = default;

  // The 16 canonical bytes: hi big-endian, then lo big-endian.
  std::array<uint8_t, 16> CanonicalBytes() const;
  // 32 lowercase hex digits of CanonicalBytes().
  std::string ToHex() const;
  // Parses ToHex() output (either case). INVALID_ARGUMENT unless exactly 32 hex digits.
  static absl::StatusOr<BlockHash> FromHex(std::string_view hex);

  template <typename H>
  friend H AbslHashValue(H h, const BlockHash& b) {
    return H::combine(std::move(h), b.lo, b.hi);
  }
  friend std::ostream& operator<<(std::ostream& os, const BlockHash& b) { return os << b.ToHex(); }
};

// What separates one cache namespace from another: blocks with equal tokens under different
// roots never match.
struct BlockHashRootKey {
  std::string model_id;
  int32_t block_size = 16;
  common::DType kv_dtype = common::DType::kF32;
  // Per-tenant / per-request isolation (as OpenAI-compatible servers' `cache_salt`).
  std::string cache_salt;
  // The checkpoint's fingerprint (common/model/checkpoint_fingerprint.h; 32 hex digits; "" only
  // in tests that have no checkpoint).
  std::string checkpoint_fingerprint;
  // NumericsSetting(activations, kv_fidelity): "activations=f32;kv=exact" by default.
  std::string numerics = "activations=f32;kv=exact";
};

// The numerics part of the root: "activations=<f32|bf16>;kv=<exact|int8>[;weights=q8_0]".
// `activations` is the cluster's activation mode (kernels' Activations name), `kv_fidelity`
// "exact" or "int8" (the opt-in lossy mode of the kv-store's tiers, which changes outputs),
// `weights` the model::WeightsMode name: only a mode other than "checkpoint" is appended, so the
// roots of clusters that keep their weights as stored did not change when the mode came.
std::string NumericsSetting(std::string_view activations, std::string_view kv_fidelity,
                            std::string_view weights = "checkpoint");

// The exact root input bytes described at the top of this file.
std::string SerializeRootKey(const BlockHashRootKey& key);

// XXH3_128 of SerializeRootKey(key).
BlockHash RootHash(const BlockHashRootKey& key);

// Hash of one block given its parent's hash and its tokens. Any number of tokens is accepted
// (callers hash only full blocks; a partial block has no identity).
BlockHash HashBlock(const BlockHash& parent, absl::Span<const int32_t> token_ids);

// The chain hashes of every *full* block of `token_ids` (floor(size / block_size) hashes); a
// trailing partial block is not hashed. REQUIRES: block_size > 0.
std::vector<BlockHash> HashFullBlocks(const BlockHash& root, absl::Span<const int32_t> token_ids,
                                      int32_t block_size);

}  // namespace moe::kv
