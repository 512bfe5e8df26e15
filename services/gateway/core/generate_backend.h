// The gateway's view of token generation (DESIGN.md §2 "Tokens on the wire"): token ids and
// sampling parameters in, token ids (with logprobs when asked), a finish reason and usage out.
// The gRPC implementation (services/gateway/grpc_backend.h) calls routers' Generate; tests use
// services/gateway/testing/fake_backend.h. Plain types mirror moe.router.v1 without proto.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace moe::gateway {

// Defaults give greedy decoding (moe.common.v1.SamplingParams semantics).
struct SamplingParams {
  float temperature = 0;  // 0 = greedy
  float top_p = 1;        // (0, 1]
  int32_t top_k = 0;      // 0 = no limit
  float min_p = 0;        // [0, 1]
  std::optional<uint64_t> seed;
  float repetition_penalty = 1;  // (0, 2]
  float frequency_penalty = 0;   // [-2, 2]
  float presence_penalty = 0;    // [-2, 2]
  std::map<int32_t, float> logit_bias;
};

struct GenerateRequest {
  std::string request_id;
  // The HTTP request's x-request-id (the client's or the gateway's, core/request_id.h): sent to
  // the router as gRPC metadata for its log lines. Unlike request_id it need not be unique.
  std::string http_request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling;
  int32_t max_tokens = 0;  // 0 = until a stop token or the context length
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;  // [0, 20]
  std::string cache_salt;
  int32_t priority = 0;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0;
};
struct TokenLogprobs {
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

// One message of the stream. With finish != kNone it is the last one and carries usage; with
// kStop its last token is the stop token (not rendered).
struct GenerateUpdate {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per token when requested
  FinishReason finish = FinishReason::kNone;
  std::optional<Usage> usage;
  std::string error_message;  // with kError
};

// Receives a stream's events: OnUpdate() zero or more times, then exactly one of OnUpdate() with
// finish != kNone or OnFailed(). Calls for one stream are serialised (never concurrent) but may
// come from any backend thread. OnFailed()'s status: kInvalidArgument / kFailedPrecondition (bad
// request), kResourceExhausted / kUnavailable (no router could take it: retry later),
// kCancelled (after Cancel()), other codes for internal failures.
class GenerateObserver {
 public:
  virtual ~GenerateObserver() = default;
  virtual void OnUpdate(GenerateUpdate update) = 0;
  virtual void OnFailed(absl::Status status) = 0;
};

// A running generation.
class GenerateCall {
 public:
  virtual ~GenerateCall() = default;
  // Asks the backend to stop at once (idempotent, any thread). The observer still gets its final
  // callback (usually OnFailed(kCancelled)), possibly already in flight.
  virtual void Cancel() = 0;
};

class GenerateBackend {
 public:
  virtual ~GenerateBackend() = default;
  // Starts generating. The observer must stay alive until its final callback has returned (hold
  // it in a shared_ptr). Never blocks on the generation itself; errors arrive via the observer.
  virtual std::unique_ptr<GenerateCall> Generate(GenerateRequest request,
                                                 std::shared_ptr<GenerateObserver> observer) = 0;
  // True once at least one router can take requests (for /readyz).
  virtual bool Ready() const = 0;
};

}  // namespace moe::gateway
