// How a KV block is kept in the kv-store's tiers: as given, losslessly compressed, or (opt-in)
// quantized to 8 bits. Plain functions over bytes.
//
// A block is a dense little-endian tensor, [num_layers, 2, block_size, num_kv_heads, head_dim]
// (2 = K then V) of f32, bf16 or f16 (proto/moe/kv_store/v1 KvBlock).
//
//   kRaw          the bytes as given.
//   kShuffleZstd  lossless: the elements' bytes regrouped by significance (all first bytes, then
//                 all second bytes, ...: the sign/exponent bytes of K/V repeat a lot, the low
//                 mantissa bytes do not) and compressed with zstd. EncodeBlock keeps it only
//                 where it pays: when it saves at least `min_savings` of the bytes, else kRaw.
//   kInt8         lossy (f32 blocks only): per (layer, K or V, head), scale = max|x| / 127 over
//                 the block's tokens and head_dim, q = round(x / scale) in [-127, 127];
//                 payload = f32 scales [num_layers, 2, num_kv_heads] then int8 q in the block's
//                 layout. Decodes to q * scale: it changes outputs, so it is a cluster-wide
//                 setting outside the exactness guarantee (DESIGN.md §3), named in the block
//                 identity's numerics ("kv=int8").
//
// Thread-safety: pure functions (zstd contexts are per call).
#pragma once

#include <atomic>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/tensor/dtype.h"

namespace moe::kv_store {

// Stored in L3 files: never renumber.
enum class Codec : uint8_t { kRaw = 0, kShuffleZstd = 1, kInt8 = 2 };
std::string_view CodecName(Codec codec);  // "raw" | "shuffle_zstd" | "int8"

// The store's setting (kv_store_options.h `core.compression`).
enum class CompressionMode : uint8_t {
  kNone,  // always kRaw
  kZstd,  // kShuffleZstd where it saves at least min_savings, else kRaw (the default)
  kInt8,  // kInt8 for f32 blocks of 5 dims (others: as kZstd); lossy
};

// What a block is: element type and dims (outermost first).
struct BlockLayout {
  common::DType dtype = common::DType::kF32;
  std::span<const int64_t> dims;
  int64_t num_elements() const;
  int64_t num_bytes() const { return num_elements() * common::DTypeSize(dtype); }
};

struct EncodedBlock {
  Codec codec = Codec::kRaw;
  std::string payload;      // empty for kRaw when the caller keeps the raw bytes (see EncodeBlock)
  bool backed_off = false;  // kRaw without a zstd try: the backoff said no (EncodeBlock)
};

struct CodecOptions {
  CompressionMode mode = CompressionMode::kZstd;
  int zstd_level = 1;        // 1 (fastest) .. 19
  double min_savings = 0.2;  // kZstd: keep compressed only when payload <= raw * (1 - this)
};

// When to stop trying zstd on blocks that do not compress. KV blocks of one model compress about
// alike (often not at all: the f32 KV of the small preset saves under 5 %, below min_savings),
// and a failed try still costs the shuffle and zstd of the whole block (~0.2 ms per 64 KiB, the
// kv-store's largest Put cost). After `kMissesBeforeBackoff` blocks in a row that were kept raw,
// only one block in `kProbeInterval` is tried; the first that pays ends the backoff. Skipped
// blocks are kept raw, as a failed try would have kept them: only the CPU spent changes (and a
// block that would have paid during a backoff is kept raw: at most kProbeInterval - 1 of them).
// Thread-safe (relaxed atomics: a few extra or skipped tries under races are harmless).
class CompressionBackoff {
 public:
  static constexpr int64_t kMissesBeforeBackoff = 8;
  static constexpr int64_t kProbeInterval = 64;

  // Whether to try compressing the next block.
  bool ShouldTry();
  // The outcome of a try: `paid` when the block was kept compressed.
  void Record(bool paid);

 private:
  std::atomic<int64_t> misses_{0};  // tries in a row that did not pay
  std::atomic<int64_t> since_probe_{0};
};

// Encodes `raw` (layout.num_bytes() bytes). For kRaw the payload is left empty: the caller keeps
// `raw` itself (no copy). With `backoff`, a zstd try is made only when it says so, and its
// outcome is recorded there. REQUIRES: raw.size() == layout.num_bytes().
EncodedBlock EncodeBlock(const CodecOptions& options, const BlockLayout& layout,
                         std::string_view raw, CompressionBackoff* backoff = nullptr);

// Decodes `payload` of `codec` into `out` (exactly layout.num_bytes() bytes), writing each byte
// once. kRaw copies. Errors: DATA_LOSS when the payload does not decode to that size (a corrupt
// block).
absl::Status DecodeBlock(Codec codec, const BlockLayout& layout, std::string_view payload,
                         std::span<uint8_t> out);

}  // namespace moe::kv_store
