// One completion request in flight: receives the backend's token stream, detokenizes it
// incrementally, matches stop strings (holding back possible prefixes), turns tool-call output
// into message.tool_calls / delta.tool_calls when the request has tools (core/tool_calls.h), and
// writes either one response or an SSE stream in OpenAI's shapes. A stop string ends the generation
// at once (the backend call is cancelled); so does the client going away (Cancel()).
//
// HTTP status of failures: an error before anything was written gets a proper HTTP error
// (headers of a stream are sent only with its first token); after the stream started it is an
// SSE event `data: {"error": {...}}` followed by `data: [DONE]`.
//
// Thread-safety: all methods are thread-safe; the observer callbacks come from backend threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/tokenizer/incremental_detokenizer.h"
#include "common/tokenizer/tokenizer.h"
#include "services/gateway/core/gateway_metrics.h"
#include "services/gateway/core/generate_backend.h"
#include "services/gateway/core/http_types.h"
#include "services/gateway/core/openai_request.h"
#include "services/gateway/core/openai_response.h"
#include "services/gateway/core/stop_matcher.h"
#include "services/gateway/core/tool_calls.h"

namespace moe::gateway {

// Chat with tools: how the output becomes message.tool_calls (core/tool_calls.h).
struct ToolSessionParams {
  ToolCallMode mode = ToolCallMode::kAuto;
  ToolCallFormat format = ToolCallFormat::kNone;
  std::vector<std::string> functions;  // the declared names
  std::string named;                   // kNamed: the function
};

struct SessionParams {
  ResponseMeta meta;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool skip_special_tokens = true;
  std::vector<std::string> stop;
  bool include_stop_str_in_output = false;
  int32_t prompt_tokens = 0;
  absl::Time received;  // when the request arrived (TTFT, e2e)
  int retry_after_s = 1;
  std::optional<ToolSessionParams> tools;  // set: chat with tool calling
};

class CompletionSession final : public GenerateObserver,
                                public std::enable_shared_from_this<CompletionSession> {
 public:
  // `on_done` runs once when the session ends, however it ends (frees the in-flight slot).
  // Everything referenced must outlive the session.
  CompletionSession(SessionParams params, const tokenizer::Tokenizer& tokenizer,
                    std::shared_ptr<ResponseWriter> writer, common::Clock& clock,
                    GatewayMetrics& metrics, std::function<void()> on_done);
  ~CompletionSession() override;

  // Starts the generation. Call once.
  void Start(GenerateBackend& backend, GenerateRequest request);
  // The client went away: cancel the generation at once; nothing more is written.
  void Cancel();

  // GenerateObserver
  void OnUpdate(GenerateUpdate update) override;
  void OnFailed(absl::Status status) override;
  // A stream asks for the router's next message once the client's socket has drained below
  // http.stream_read_pause_bytes (ResponseWriter::WhenWritable); a non-stream request, a finished
  // or cancelled one, at once.
  void WhenReady(std::function<void()> more) override;

 private:
  RenderedLogprob RenderLogprob(int32_t token_id, const TokenLogprobs& lp) const;
  // Writes the final chunks / the full response. Returns true when the backend must be cancelled
  // (stopped early by a stop string).
  void FinishLocked(generation::FinishReason reason, std::optional<generation::Usage> usage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // FinishLocked's output for a chat request with tools.
  void FinishToolsLocked(generation::FinishReason reason, const generation::Usage& usage)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(const absl::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnsureStreamStartedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(generation::FinishReason reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const SessionParams params_;
  const tokenizer::Tokenizer& tokenizer_;
  const std::shared_ptr<ResponseWriter> writer_;
  common::Clock& clock_;
  GatewayMetrics& metrics_;

  absl::Mutex mu_;
  std::function<void()> on_done_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<GenerateCall> call_ ABSL_GUARDED_BY(mu_);
  tokenizer::IncrementalDetokenizer detok_ ABSL_GUARDED_BY(mu_);
  StopMatcher stop_ ABSL_GUARDED_BY(mu_);
  std::optional<ToolCallParser> tools_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool cancel_requested_ ABSL_GUARDED_BY(mu_) = false;  // stop string or client gone
  bool client_gone_ ABSL_GUARDED_BY(mu_) = false;
  bool stream_started_ ABSL_GUARDED_BY(mu_) = false;
  int32_t tokens_seen_ ABSL_GUARDED_BY(mu_) = 0;
  int32_t text_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string text_ ABSL_GUARDED_BY(mu_);  // non-stream: the whole output
  std::vector<RenderedLogprob> logprobs_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Time> first_token_at_ ABSL_GUARDED_BY(mu_);
  absl::Time last_token_at_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::gateway
