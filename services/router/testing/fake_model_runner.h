// A deterministic ModelRunner that really uses its paged "KV cache": each slot stores a hash of
// (token id, position), and the logits after position p are a pure function of the slots 0..p read
// through the block table. So a wrong block table, a prefix hit on the wrong block, a missing
// copy-on-write or an evicted-but-still-used block all change the tokens — which makes the
// scheduler's "caching never changes output" tests able to fail.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/testing/fake_clock.h"
#include "services/router/core/model_runner.h"

namespace moe::router::testing {

struct FakeModelRunnerOptions {
  int64_t vocab_size = 256;
  int64_t max_context = 4096;
  int64_t num_kv_blocks = 64;
  int64_t kv_block_size = 4;
};

class FakeModelRunner final : public ModelRunner {
 public:
  explicit FakeModelRunner(const FakeModelRunnerOptions& options);

  // The tokens a plain, unpaged greedy run produces: the oracle for scheduler tests.
  // Stops after a token in `stop_token_ids` (included) or after max_tokens.
  static std::vector<int32_t> GreedyReference(int64_t vocab_size,
                                              const std::vector<int32_t>& prompt,
                                              int64_t max_tokens,
                                              const std::vector<int32_t>& stop_token_ids = {});

  // Each later Step advances `clock` by `per_token` for every token it computes (a model whose
  // throughput the scheduler can measure).
  void AdvanceClockOnStep(common::testing::FakeClock* clock, absl::Duration per_token) {
    step_clock_ = clock;
    time_per_token_ = per_token;
  }

  // Makes the next `n` Step calls fail with `status`.
  void FailNextSteps(int n, absl::Status status);

  int64_t num_steps() const { return num_steps_; }
  // Tokens whose KV was computed (prefill + decode rows) over all steps.
  int64_t num_computed_tokens() const { return num_computed_tokens_; }
  int64_t num_block_copies() const { return num_block_copies_; }
  // Largest number of chunks seen in one step.
  int64_t max_chunks_per_step() const { return max_chunks_per_step_; }

  // ModelRunner
  int64_t vocab_size() const override { return options_.vocab_size; }
  int64_t max_context() const override { return options_.max_context; }
  int64_t num_kv_blocks() const override { return options_.num_kv_blocks; }
  int64_t kv_block_size() const override { return options_.kv_block_size; }
  absl::Status Step(std::span<const StepChunk> chunks, std::vector<float>* logits) override;
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block) override;
  // A block's "K/V" is its slots' u64 words, moved as [1, 2, block_size, 1, 1] f32 (8 bytes per
  // slot): the kv tier's fakes then carry exactly what the logits depend on.
  std::vector<int64_t> kv_block_dims() const override {
    return {1, 2, options_.kv_block_size, 1, 1};
  }
  int64_t kv_block_bytes() const override { return options_.kv_block_size * 8; }
  absl::Status ReadKvBlock(int32_t block_id, std::span<uint8_t> dst) override;
  absl::Status WriteKvBlock(int32_t block_id, int64_t offset,
                            std::span<const uint8_t> src) override;
  // Zeroes every slot of `block_id` (tests: a block whose KV was lost).
  void ClearBlockForTesting(int32_t block_id);

 private:
  const FakeModelRunnerOptions options_;
  std::vector<uint64_t> slots_;  // [num_kv_blocks * kv_block_size]; 0 = never written
  common::testing::FakeClock* step_clock_ = nullptr;
  absl::Duration time_per_token_;
  int fail_steps_ = 0;
  absl::Status fail_status_;
  int64_t num_steps_ = 0;
  int64_t num_computed_tokens_ = 0;
  int64_t num_block_copies_ = 0;
  int64_t max_chunks_per_step_ = 0;
};

}  // namespace moe::router::testing
