#include "services/router/core/engine_model_runner.h"

#include <algorithm>
#include <cstring>
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

std::vector<int64_t> EngineModelRunner::kv_block_dims() const {
  const engine::KvCache& kv = rep_->engine->kv_cache();
  const kernels::PagedKvLayout& l = kv.layout();
  return {kv.num_layers(), 2, l.block_size, l.num_kv_heads, l.head_dim};
}

int64_t EngineModelRunner::kv_block_bytes() const {
  const engine::KvCache& kv = rep_->engine->kv_cache();
  return 2 * kv.num_layers() * kv.floats_per_block() * static_cast<int64_t>(sizeof(float));
}

// The wire layout is [layer][K, V][slots of one block]: chunk c = 2 * layer + (V ? 1 : 0) is
// the block's contiguous run of floats_per_block floats in that layer's K or V array.
absl::Status EngineModelRunner::ReadKvBlock(int32_t block_id, std::span<uint8_t> dst) {
  engine::KvCache& kv = rep_->engine->kv_cache();
  if (block_id < 0 || block_id >= kv.num_blocks() ||
      static_cast<int64_t>(dst.size()) != kv_block_bytes()) {
    return absl::InvalidArgumentError("ReadKvBlock: bad block id or size");
  }
  const int64_t fpb = kv.floats_per_block();
  const size_t chunk = static_cast<size_t>(fpb) * sizeof(float);
  for (int64_t layer = 0; layer < kv.num_layers(); ++layer) {
    std::memcpy(dst.data() + (2 * layer) * chunk, kv.k(layer) + block_id * fpb, chunk);
    std::memcpy(dst.data() + (2 * layer + 1) * chunk, kv.v(layer) + block_id * fpb, chunk);
  }
  return absl::OkStatus();
}

absl::Status EngineModelRunner::WriteKvBlock(int32_t block_id, int64_t offset,
                                             std::span<const uint8_t> src) {
  engine::KvCache& kv = rep_->engine->kv_cache();
  if (block_id < 0 || block_id >= kv.num_blocks() || offset < 0 ||
      offset + static_cast<int64_t>(src.size()) > kv_block_bytes()) {
    return absl::InvalidArgumentError("WriteKvBlock: bad block id or range");
  }
  const int64_t fpb = kv.floats_per_block();
  const int64_t chunk = fpb * static_cast<int64_t>(sizeof(float));
  size_t done = 0;
  while (done < src.size()) {
    const int64_t at = offset + static_cast<int64_t>(done);
    const int64_t c = at / chunk;
    const int64_t within = at % chunk;
    const size_t n = std::min(src.size() - done, static_cast<size_t>(chunk - within));
    float* base = (c % 2 == 0 ? kv.k(c / 2) : kv.v(c / 2)) + block_id * fpb;
    std::memcpy(reinterpret_cast<uint8_t*>(base) + within, src.data() + done, n);
    done += n;
  }
  return absl::OkStatus();
}

absl::Status EngineModelRunner::ChunkStatus(size_t chunk) const {
  const std::vector<absl::Status>& status = rep_->out.item_status;
  if (chunk >= status.size()) return absl::OkStatus();
  return status[chunk];
}

}  // namespace moe::router
