#include "services/router/testing/scheduler_harness.h"

#include <utility>

namespace moe::router::testing {

bool Poll(RequestStream& stream, Collected* out) {
  while (auto event = stream.Next(absl::ZeroDuration())) {
    out->token_ids.insert(out->token_ids.end(), event->token_ids.begin(), event->token_ids.end());
    if (event->final()) {
      out->finish_reason = event->finish_reason;
      out->status = event->status;
      out->usage = event->usage;
      return true;
    }
  }
  return out->finish_reason != generation::FinishReason::kNone;
}

Collected ReadAll(RequestStream& stream) {
  Collected out;
  while (auto event = stream.Next()) {
    out.token_ids.insert(out.token_ids.end(), event->token_ids.begin(), event->token_ids.end());
    if (event->final()) {
      out.finish_reason = event->finish_reason;
      out.status = event->status;
      out.usage = event->usage;
      break;
    }
  }
  return out;
}

int64_t RunUntilIdle(Scheduler& scheduler, int64_t max_steps) {
  int64_t steps = 0;
  while (scheduler.HasWork() && steps < max_steps) {
    scheduler.Step();
    ++steps;
  }
  return steps;
}

absl::StatusOr<std::unique_ptr<kv::BlockManager>> MakeBlockManager(const ModelRunner& runner,
                                                                   bool enable_prefix_caching) {
  kv::BlockManagerOptions options;
  options.block_size = static_cast<int32_t>(runner.kv_block_size());
  options.num_blocks = runner.num_kv_blocks();
  options.enable_prefix_caching = enable_prefix_caching;
  options.model_id = "test";
  return kv::BlockManager::Create(options);
}

GenerateRequest GreedyRequest(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest request;
  request.prompt_token_ids = std::move(prompt);
  request.sampling.temperature = 0.0f;
  request.sampling.max_tokens = max_tokens;
  return request;
}

}  // namespace moe::router::testing
