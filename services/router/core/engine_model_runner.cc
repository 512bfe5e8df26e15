#include "services/router/core/engine_model_runner.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace moe::router {

struct EngineModelRunner::Rep {
  engine::Engine* const engine;
  std::vector<engine::StepItem> items;  // [chunks] of the current step
  engine::StepOutput out;               // of the last step: ChunkStatus, last_expert_tokens
};

EngineModelRunner::EngineModelRunner(engine::Engine* engine)
    : rep_(std::make_unique<Rep>(Rep{.engine = engine})) {}
EngineModelRunner::~EngineModelRunner() = default;

const std::vector<int64_t>& EngineModelRunner::last_expert_tokens() const {
  return rep_->out.expert_tokens;
}

int64_t EngineModelRunner::vocab_size() const { return rep_->engine->vocab_size(); }
int64_t EngineModelRunner::max_context() const {
  return rep_->engine->config().max_position_embeddings;
}
int64_t EngineModelRunner::num_kv_blocks() const { return rep_->engine->kv_cache().num_blocks(); }
int64_t EngineModelRunner::kv_block_size() const { return rep_->engine->kv_cache().block_size(); }

absl::Status EngineModelRunner::Step(std::span<const StepChunk> chunks,
                                     std::vector<float>* logits) {
  std::vector<engine::StepItem>& items = rep_->items;
  items.clear();
  for (const StepChunk& c : chunks) {
    engine::StepItem item;
    item.token_ids = absl::MakeConstSpan(c.token_ids.data(), c.token_ids.size());
    item.start_pos = c.start_pos;
    item.block_table = absl::MakeConstSpan(c.block_table.data(), c.block_table.size());
    item.logits = c.want_logits ? engine::LogitsMode::kLast : engine::LogitsMode::kNone;
    items.push_back(item);
  }
  absl::Status status = rep_->engine->Step(items, &rep_->out);
  if (!status.ok()) return status;
  // The engine already packs wanted rows in item order, one row per kLast item.
  const int64_t vocab = rep_->engine->vocab_size();
  const engine::StepOutput& out = rep_->out;
  logits->assign(out.logits.begin(),
                 out.logits.begin() + static_cast<int64_t>(out.row_begin.back()) * vocab);
  return absl::OkStatus();
}

absl::Status EngineModelRunner::CopyBlock(int32_t src_block, int32_t dst_block) {
  return rep_->engine->kv_cache().CopyBlock(src_block, dst_block);
}

absl::Status EngineModelRunner::ChunkStatus(size_t chunk) const {
  const std::vector<absl::Status>& status = rep_->out.item_status;
  if (chunk >= status.size()) return absl::OkStatus();
  return status[chunk];
}

}  // namespace moe::router
