// Why a generation ended: one enum for the engine's generator, the router's scheduler and the
// gateway. The wire form is moe.router.v1.FinishReason (FINISH_REASON_UNSPECIFIED = kNone, ...);
// the conversion lives in the server adapters (services/router/router_server.cc,
// services/gateway/grpc_backend.cc).
#pragma once

#include <cstdint>
#include <string_view>

namespace moe::generation {

enum class FinishReason : uint8_t {
  kNone = 0,  // still running (only on non-final stream events)
  kStop,      // sampled an EOS or stop token id (the stop token is part of the output)
  kLength,    // reached max_tokens or the model context
  kAbort,     // cancelled by the client, deadline passed, or the scheduler shut down
  kError,     // the engine failed on a step that included this request
};

// "stop", "length", "abort", "error" ("" for kNone): the `finish_reason` label values of
// DESIGN.md §5 and OpenAI's `finish_reason` strings.
constexpr std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
    case FinishReason::kNone:
      break;
  }
  return "";
}

}  // namespace moe::generation
