// ModelRunner over the real MoE engine (common/engine): the scheduler's chunks become engine
// StepItems, and the engine's KvCache is the pool the block manager hands out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "common/engine/engine.h"
#include "services/router/core/model_runner.h"

namespace moe::router {

// Not thread-safe (as ModelRunner). Borrows `engine`, which must outlive it.
class EngineModelRunner final : public ModelRunner {
 public:
  explicit EngineModelRunner(engine::Engine* engine);
  ~EngineModelRunner() override;
  EngineModelRunner(const EngineModelRunner&) = delete;
  EngineModelRunner& operator=(const EngineModelRunner&) = delete;

  // Expert tokens of the last step, [num_layers * num_experts] (the load statistics' input).
  const std::vector<int64_t>& last_expert_tokens() const;

  // ModelRunner
  int64_t vocab_size() const override;
  int64_t max_context() const override;
  int64_t num_kv_blocks() const override;
  int64_t kv_block_size() const override;
  absl::Status Step(std::span<const StepChunk> chunks, std::vector<float>* logits) override;
  absl::Status CopyBlock(int32_t src_block, int32_t dst_block) override;
  absl::Status ChunkStatus(size_t chunk) const override;
  std::vector<int64_t> kv_block_dims() const override;
  int64_t kv_block_bytes() const override;
  absl::Status ReadKvBlock(int32_t block_id, std::span<uint8_t> dst) override;
  absl::Status WriteKvBlock(int32_t block_id, int64_t offset,
                            std::span<const uint8_t> src) override;

 private:
  struct Rep;  // the engine, and the step's items and output reused across steps (.cc)
  const std::unique_ptr<Rep> rep_;
};

}  // namespace moe::router
