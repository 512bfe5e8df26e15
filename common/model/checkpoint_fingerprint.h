// The fingerprint of a checkpoint's files: what the KV block identity's root names as "what
// computed these blocks" (common/kv/block_hash.h, DESIGN.md §3), so that K/V computed by another
// checkpoint under the same model id (a fine-tune, a re-export, another dtype) never matches in
// the kv-store's tiers, which outlive processes.
//
//   fingerprint = hex( XXH3_128( "moe.ckpt.v1"
//                                ‖ u64le(len(config.json)) ‖ config.json bytes
//                                ‖ for each *.safetensors file, by name (byte order):
//                                    u64le(len(name)) ‖ name ‖ u64le(file size)
//                                    ‖ the file's sampled bytes ) )
//
// A file's sampled bytes are the whole file when it is at most kFullHashBytes; otherwise its
// safetensors header (the first 8 + header-length bytes: tensor names, dtypes, shapes, offsets)
// and, of the rest, the kSampleBytes at every kSampleStride offset from the header's end plus the
// last kSampleBytes. A large checkpoint costs ~1/256 of its size in reads (5 MiB for the 1.3 GB
// bench preset), and a fine-tune, which changes every weight, changes every sample. Hex is 32
// lowercase digits (the XXH128 canonical form, as block_hash.h prints hashes).
//
// Thread-safety: pure; reads files with pread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace moe::model {

inline constexpr int64_t kFullHashBytes = 64ll << 20;
inline constexpr int64_t kSampleBytes = 4096;
inline constexpr int64_t kSampleStride = 1ll << 20;

// The fingerprint of the checkpoint in `model_dir` (config.json and every *.safetensors file in
// it). Errors: NOT_FOUND (no config.json or no safetensors file), INTERNAL (a read failed).
absl::StatusOr<std::string> CheckpointFingerprint(const std::string& model_dir);

}  // namespace moe::model
