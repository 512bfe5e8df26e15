// Helpers for tests and benches that drive a Scheduler by hand (Step() on the caller's thread)
// over a FakeModelRunner or a real engine.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/kv/block_manager.h"
#include "services/router/core/model_runner.h"
#include "services/router/core/request.h"
#include "services/router/core/request_stream.h"
#include "services/router/core/router_metrics.h"
#include "services/router/core/scheduler.h"

namespace moe::router::testing {

// Everything one event stream said: all tokens, and the final event's reason/status/usage.
struct Collected {
  std::vector<int32_t> token_ids;
  generation::FinishReason finish_reason = generation::FinishReason::kNone;
  absl::Status status;
  generation::Usage usage;
};

// Reads what `stream` has now without waiting, appending to `out`. Returns true once the final
// event has been read.
bool Poll(RequestStream& stream, Collected* out);
// Blocks until the stream ends (for tests where the scheduler loop runs on its own thread).
Collected ReadAll(RequestStream& stream);

// Steps `scheduler` until it has no work, at most `max_steps` times; returns the steps taken.
int64_t RunUntilIdle(Scheduler& scheduler, int64_t max_steps = 100000);

// A block manager matching `runner`'s KV cache (same block size, all its blocks).
absl::StatusOr<std::unique_ptr<kv::BlockManager>> MakeBlockManager(const ModelRunner& runner,
                                                                   bool enable_prefix_caching);

// A greedy request for `max_tokens` tokens.
GenerateRequest GreedyRequest(std::vector<int32_t> prompt, int32_t max_tokens);

}  // namespace moe::router::testing
