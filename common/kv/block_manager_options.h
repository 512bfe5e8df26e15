// Configuration of the L1 KV block manager (common/kv/block_manager.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/kv/block_hash.h"
#include "common/kv/eviction_policy.h"
#include "common/tensor/dtype.h"

namespace moe::kv {

struct BlockManagerOptions {
  // Tokens per block. 1..65536.
  int32_t block_size = 16;

  // Pool size: either `num_blocks` > 0, or a memory budget: num_blocks =
  // floor(memory_budget_bytes / bytes_per_block) (see KvBytesPerBlock). Exactly one of the two
  // forms. The resolved size must be in [1, 2^31 - 2] (block ids are int32 in the kernels).
  int64_t num_blocks = 0;
  int64_t memory_budget_bytes = 0;
  int64_t bytes_per_block = 0;

  // Automatic prefix caching: computed full blocks are registered under their chain hash and
  // reused by later sequences whose prompt starts with the same blocks.
  bool enable_prefix_caching = true;
  // Which unreferenced cached block is reused first when no block is free.
  EvictionPolicyKind eviction_policy = EvictionPolicyKind::kLru;

  // Cache namespace (block_hash.h): a sequence's root hash is RootHash({model_id, block_size,
  // kv_dtype, <the sequence's cache_salt>, checkpoint_fingerprint, numerics}).
  std::string model_id;
  common::DType kv_dtype = common::DType::kF32;
  std::string checkpoint_fingerprint;  // common/model/checkpoint_fingerprint.h
  std::string numerics = NumericsSetting("f32", "exact");

  // OK, or INVALID_ARGUMENT naming the first bad field.
  absl::Status Validate() const;
  // The pool size these options give. REQUIRES: Validate().ok().
  int64_t ResolvedNumBlocks() const;
};

// Bytes one block occupies in the engine's K and V caches over all layers:
// 2 (K and V) x num_layers x block_size x num_kv_heads x head_dim x DTypeSize(dtype).
int64_t KvBytesPerBlock(int64_t num_layers, int64_t block_size, int64_t num_kv_heads,
                        int64_t head_dim, common::DType dtype);

}  // namespace moe::kv
