// The gateway's view of token generation (DESIGN.md §2 "Tokens on the wire"): token ids and
// sampling parameters in, token ids (with logprobs when asked), a finish reason and usage out.
// The gRPC implementation (services/gateway/grpc_backend.h) calls routers' Generate; tests use
// services/gateway/testing/fake_backend.h. Plain types mirror moe.router.v1 without proto; the
// sampling parameters, finish reason and usage are the shared common/generation vocabulary.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/generation/constraint.h"
#include "common/generation/finish_reason.h"
#include "common/generation/sampling_params.h"
#include "common/generation/usage.h"

namespace moe::gateway {

struct GenerateRequest {
  std::string request_id;
  // The HTTP request's x-request-id (the client's or the gateway's, core/request_id.h): sent to
  // the router as gRPC metadata for its log lines. Unlike request_id it need not be unique.
  std::string http_request_id;
  std::vector<int32_t> prompt_token_ids;
  // How tokens are chosen and when generation stops: temperature ... logit_bias, max_tokens,
  // stop_token_ids, ignore_eos, logprobs (-1: none, else the number of top alternatives in
  // [0, 20]). max_tokens >= 1 (0 on the wire means "until the context ends"); for a prefill
  // only, see prefill_only. logprobs_mode is not sent (routers return raw logprobs).
  generation::SamplingParams sampling;
  std::string cache_salt;
  int32_t priority = 0;
  // Compute the prompt's KV blocks into the router's prefix cache and generate nothing
  // (router.proto prefill_only): the stream ends with one update, kLength, completion_tokens 0.
  // sampling is ignored.
  bool prefill_only = false;
  // Structured output: the router masks every step with it (inactive: unconstrained).
  generation::Constraint constraint;
};

struct TopLogprob {
  int32_t token_id = 0;
  float logprob = 0;
};
struct TokenLogprobs {
  float logprob = 0;
  std::vector<TopLogprob> top;
};

// One message of the stream. With finish != kNone it is the last one and carries usage; with
// kStop its last token is the stop token (not rendered).
struct GenerateUpdate {
  std::vector<int32_t> token_ids;
  std::vector<TokenLogprobs> logprobs;  // one per token when requested
  generation::FinishReason finish = generation::FinishReason::kNone;
  std::optional<generation::Usage> usage;
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
  // Flow control (back-pressure to the router): after an OnUpdate() that is not the last, a
  // backend that honours it reads the stream's next message only once `more` has run. Run it
  // exactly once, from any thread, possibly from inside this call (the default: at once). While
  // it has not run the router's stream is not read, so the router's bounded stream fills and it
  // stops decoding the sequence (services/router: stream_capacity). Cancel() still works then;
  // the final callback comes after `more` has run.
  virtual void WhenReady(std::function<void()> more) { more(); }
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
