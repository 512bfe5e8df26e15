#include "services/router/core/engine_model_runner.h"

#include <algorithm>

namespace moe::router {

EngineModelRunner::EngineModelRunner(engine::Engine* engine) : engine_(engine) {}

int64_t EngineModelRunner::vocab_size() const { return engine_->vocab_size(); }
int64_t EngineModelRunner::max_context() const { return engine_->config().max_position_embeddings; }
int64_t EngineModelRunner::num_kv_blocks() const { return engine_->kv_cache().num_blocks(); }
int64_t EngineModelRunner::kv_block_size() const { return engine_->kv_cache().block_size(); }

absl::Status EngineModelRunner::Step(std::span<const StepChunk> chunks,
                                     std::vector<float>* logits) {
  items_.clear();
  for (const StepChunk& c : chunks) {
    engine::StepItem item;
    item.token_ids = absl::MakeConstSpan(c.token_ids.data(), c.token_ids.size());
    item.start_pos = c.start_pos;
    item.block_table = absl::MakeConstSpan(c.block_table.data(), c.block_table.size());
    item.logits = c.want_logits ? engine::LogitsMode::kLast : engine::LogitsMode::kNone;
    items_.push_back(item);
  }
  absl::Status status = engine_->Step(items_, &out_);
  if (!status.ok()) return status;
  // The engine already packs wanted rows in item order, one row per kLast item.
  const int64_t vocab = engine_->vocab_size();
  logits->assign(out_.logits.begin(),
                 out_.logits.begin() + static_cast<int64_t>(out_.row_begin.back()) * vocab);
  return absl::OkStatus();
}

absl::Status EngineModelRunner::CopyBlock(int32_t src_block, int32_t dst_block) {
  return engine_->kv_cache().CopyBlock(src_block, dst_block);
}

absl::Status EngineModelRunner::ChunkStatus(size_t chunk) const {
  if (chunk >= out_.item_status.size()) return absl::OkStatus();
  return out_.item_status[chunk];
}

}  // namespace moe::router
