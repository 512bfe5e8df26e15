// Small integer mixers for deterministic pseudo-randomness: test fixtures, tie-breaks, the random
// checkpoints of `moe make-model`, the sampler's counter-based stream. Not for hash tables (use
// absl::Hash) and not for block identity (XXH3-128, common/kv/block_hash.h).
#pragma once

#include <cstdint>

namespace moe::common {

// The golden-ratio increment of the splitmix64 sequence: state_i = seed + i * kGoldenGamma.
inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;

// The splitmix64 finaliser (Stafford's variant 13): a bijection of 64-bit words whose output
// bits each depend on every input bit.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// One splitmix64 step from state `x`: Mix64(x + kGoldenGamma). SplitMix64(seed + i * kGoldenGamma)
// is the i-th draw of the sequence seeded with `seed`.
constexpr uint64_t SplitMix64(uint64_t x) { return Mix64(x + kGoldenGamma); }

}  // namespace moe::common
