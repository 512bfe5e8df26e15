// The scheduler's seam to the forward pass: run one mixed batch of prefill chunks and decode
// tokens over the paged KV cache, return logits for the rows asked for. The real implementation
// (EngineModelRunner) wraps common/engine; testing/fake_model_runner.h is a deterministic fake.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/base/ids.h"

namespace moe::router {

// One sequence's slice of a step: tokens at positions start_pos .. start_pos + n - 1.
struct StepChunk {
  common::SeqId seq_id;
  std::span<const int32_t> token_ids;    // [n], n >= 1
  int32_t start_pos = 0;                 // KV of positions [0, start_pos) is already cached
  std::span<const int32_t> block_table;  // block ids covering positions [0, start_pos + n)
  bool want_logits = false;              // logits after the chunk's last token
};

// Not thread-safe: one scheduler thread drives it.
class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  virtual int64_t vocab_size() const = 0;
  // Longest sequence (prompt + generated) the model supports.
  virtual int64_t max_context() const = 0;
  // Number of KV blocks the runner's cache holds (block ids are [0, num_kv_blocks)).
  virtual int64_t num_kv_blocks() const = 0;
  virtual int64_t kv_block_size() const = 0;

  // Runs one step. Writes the KV of every chunk token into its slot, then fills `logits` with
  // [number of chunks with want_logits, vocab_size] f32 rows in chunk order. A row's result never
  // depends on the other chunks of the step or on how its prefill was chunked.
  // Errors: whatever the engine returns (the scheduler fails the step's requests with it).
  virtual absl::Status Step(std::span<const StepChunk> chunks, std::vector<float>* logits) = 0;

  // After a successful Step(): OK, or why chunk `chunk` could not be computed (UNAVAILABLE: no
  // live replica of an expert one of its tokens needed). Its logits row (if any) is garbage and
  // the scheduler ends its sequence with this error; the other chunks are exact.
  virtual absl::Status ChunkStatus(size_t chunk) const { return absl::OkStatus(); }

  // Copies the KV of block `src_block` into `dst_block` (every layer): copy-on-write.
  virtual absl::Status CopyBlock(int32_t src_block, int32_t dst_block) = 0;

  // A block's K/V as the kv tiers move it: kv_block_dims() = [num_layers, 2, block_size,
  // num_kv_heads, head_dim] f32 (2 = K then V), kv_block_bytes() bytes; empty / 0 when this
  // runner cannot move blocks (the scheduler then leaves the kv tier alone).
  virtual std::vector<int64_t> kv_block_dims() const { return {}; }
  virtual int64_t kv_block_bytes() const { return 0; }
  // Copies block `block_id`'s K/V, every layer, into `dst` (kv_block_bytes() bytes) in that
  // layout. INVALID_ARGUMENT for a bad id or size. Between steps only.
  virtual absl::Status ReadKvBlock(int32_t block_id, std::span<uint8_t> dst) {
    return absl::UnimplementedError("this runner cannot read KV blocks");
  }
  // Writes bytes [offset, offset + src.size()) of block `block_id`'s K/V in that layout.
  // INVALID_ARGUMENT for a bad id or range. Between steps only.
  virtual absl::Status WriteKvBlock(int32_t block_id, int64_t offset,
                                    std::span<const uint8_t> src) {
    return absl::UnimplementedError("this runner cannot write KV blocks");
  }
};

}  // namespace moe::router
