#include "common/kv/block_manager_options.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace moe::kv {

absl::Status BlockManagerOptions::Validate() const {
  if (block_size < 1 || block_size > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_size must be in [1, 65536], got ", block_size));
  }
  const bool by_count = num_blocks != 0;
  const bool by_budget = memory_budget_bytes != 0 || bytes_per_block != 0;
  if (by_count == by_budget) {
    return absl::InvalidArgumentError(
        "set exactly one of num_blocks or (memory_budget_bytes, bytes_per_block)");
  }
  if (by_count && num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks must be > 0, got ", num_blocks));
  }
  if (by_budget && (memory_budget_bytes <= 0 || bytes_per_block <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory_budget_bytes and bytes_per_block must both be > 0, got ",
                     memory_budget_bytes, " and ", bytes_per_block));
  }
  const int64_t n = ResolvedNumBlocks();
  constexpr int64_t kMaxBlocks = std::numeric_limits<int32_t>::max() - 1;
  if (n < 1 || n > kMaxBlocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pool must hold 1..", kMaxBlocks, " blocks, the options give ", n));
  }
  switch (eviction_policy) {
    case EvictionPolicyKind::kLru:
      break;
    default:
      return absl::InvalidArgumentError("eviction_policy: the L1 block manager supports lru only");
  }
  return absl::OkStatus();
}

int64_t BlockManagerOptions::ResolvedNumBlocks() const {
  if (num_blocks != 0) return num_blocks;
  return bytes_per_block > 0 ? memory_budget_bytes / bytes_per_block : 0;
}

int64_t KvBytesPerBlock(int64_t num_layers, int64_t block_size, int64_t num_kv_heads,
                        int64_t head_dim, common::DType dtype) {
  return 2 * num_layers * block_size * num_kv_heads * head_dim * common::DTypeSize(dtype);
}

}  // namespace moe::kv
