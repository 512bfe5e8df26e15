// The router's L1 K/V tensor storage (DESIGN.md §2): per layer, K and V arrays in the paged layout
// of kernels.h, [num_blocks, block_size, num_kv_heads, head_dim] f32.
//
// KvCache owns memory only. Which block belongs to which sequence (block tables, reference counts,
// prefix sharing) is the block manager's business (common/kv); the engine reads and writes through
// the block tables its caller passes in each step.
//
// Thread-safety: not thread-safe. The engine's step thread owns it; CopyBlock must not run while a
// step is in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/kernels/kernels.h"

namespace moe::engine {

struct KvCacheOptions {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;  // tokens per block
  // The byte budget for K and V of all layers; num_blocks = budget / BytesPerBlock(). Ignored when
  // num_blocks > 0.
  int64_t budget_bytes = 0;
  int64_t num_blocks = 0;

  // Bytes one block takes across all layers, K and V.
  int64_t BytesPerBlock() const;
  // InvalidArgument unless every dimension is positive and the budget yields >= 1 block.
  absl::Status Validate() const;
};

class KvCache {
 public:
  // Memory is reserved zero-filled and committed lazily by the OS as blocks are first written, in
  // transparent huge pages where the kernel allows (THP "madvise" or "always"): a 4 KiB page
  // fault costs ~8 us on a paravirtualised VM, so a 2k-token prompt's first use of 8 MiB of fresh
  // K/V (small preset) took ~17 ms in faults; with 2 MiB pages 0.3-3.7 ms, and the attention's
  // walks over scattered blocks miss the TLB less. RSS then grows in 2 MiB steps.
  // Errors: InvalidArgument (bad options), ResourceExhausted (allocation failed).
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(const KvCacheOptions& options);

  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const kernels::PagedKvLayout& layout() const { return layout_; }
  int64_t num_blocks() const { return layout_.num_blocks; }
  int64_t block_size() const { return layout_.block_size; }
  int64_t num_layers() const { return static_cast<int64_t>(k_.size()); }
  // Floats in one block of one layer's K (or V).
  int64_t floats_per_block() const { return floats_per_block_; }
  int64_t total_bytes() const;

  // The whole K (V) array of `layer_idx`. REQUIRES: 0 <= layer_idx < num_layers().
  float* k(int64_t layer_idx) { return k_[layer_idx].get(); }
  float* v(int64_t layer_idx) { return v_[layer_idx].get(); }
  const float* k(int64_t layer_idx) const { return k_[layer_idx].get(); }
  const float* v(int64_t layer_idx) const { return v_[layer_idx].get(); }

  // Copies block `src` onto block `dst` in every layer, K and V (the block manager's
  // copy-on-write). InvalidArgument on an out-of-range id; src == dst is a no-op.
  absl::Status CopyBlock(int32_t src, int32_t dst);

  // One block of one layer's K (or V when `value`), for tests that perturb the cache.
  absl::Span<float> BlockForTesting(int64_t layer_idx, int32_t block_id, bool value);

 private:
  struct UnmapDeleter {
    size_t bytes = 0;  // of the mapping
    void operator()(float* p) const;
  };
  using Buffer = std::unique_ptr<float, UnmapDeleter>;
  // `bytes` of zeroed, lazily committed memory on 2 MiB boundaries, backed by transparent huge
  // pages where the kernel allows (MADV_HUGEPAGE). Null when the mapping fails.
  static Buffer Allocate(size_t bytes);

  KvCache(const kernels::PagedKvLayout& layout, std::vector<Buffer> k, std::vector<Buffer> v);

  kernels::PagedKvLayout layout_;
  int64_t floats_per_block_;
  std::vector<Buffer> k_;
  std::vector<Buffer> v_;
};

}  // namespace moe::engine
