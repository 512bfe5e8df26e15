// The gateway's request handling, independent of the HTTP transport (DESIGN.md §4: the server
// parses the wire, this core decides). Routes:
//   POST /v1/chat/completions, POST /v1/completions   generation (stream or not)
//   GET  /v1/models                                    the served model, with max_model_len
//   POST /tokenize, POST /detokenize                   vLLM-style helpers
//   GET  /healthz (liveness), /readyz (a router is reachable and not draining), /metrics
//        (unless metrics.separate_port; 401 without metrics.bearer_token_file's token)
//   POST /v1/audio/transcriptions, /v1/audio/speech     speech in and out (audio_endpoints.h)
//   GET  /v1/realtime (WebSocket upgrade)               the realtime API (realtime_session.h)
//   GET  /, /playground/*                               the browser playground (static files)
// Protection, in order: draining (503), API key (401), per-key rate limit (429), parsing and
// validation (400/404; a constraint from response_format / tools that does not compile is a 400
// naming the problem, checked with the gateway's own GrammarCache), prompt length (400),
// in-flight bound (503), then generation.
//
// Thread-safety: Handle() may be called concurrently from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/grammar/grammar_cache.h"
#include "common/metrics/metrics_auth.h"
#include "common/metrics/registry.h"
#include "common/tokenizer/tokenizer.h"
#include "services/gateway/core/api_error.h"
#include "services/gateway/core/api_keys.h"
#include "services/gateway/core/audio_endpoints.h"
#include "services/gateway/core/gateway_metrics.h"
#include "services/gateway/core/gateway_options.h"
#include "services/gateway/core/generate_backend.h"
#include "services/gateway/core/http_types.h"
#include "services/gateway/core/openai_request.h"
#include "services/gateway/core/prompt_builder.h"
#include "services/gateway/core/rate_limiter.h"
#include "services/gateway/core/timer_queue.h"
#include "services/gateway/core/tool_calls.h"
#include "services/gateway/core/voice_backend.h"
#include "services/gateway/core/voice_metrics.h"

namespace moe::gateway {

// What the gateway serves: from options and the model directory's config.json.
struct ModelInfo {
  std::string id;
  int32_t max_model_len = 0;
  int64_t created = 0;  // unix seconds shown in /v1/models
};

// id = options.model_id or the directory's base name; max_model_len = options.max_model_len or
// config.json's max_position_embeddings. kNotFound / kInvalidArgument naming the file.
absl::StatusOr<ModelInfo> LoadModelInfo(const GatewayOptions& options);

// Keys from options.auth (list and file). kNotFound when the file cannot be read.
// The key store of `options` (null when auth is off). Inline keys must be digests.
absl::StatusOr<std::unique_ptr<ApiKeyStore>> LoadApiKeys(const AuthOptions& options,
                                                         common::Clock& clock);

// What the gateway borrows; everything must outlive it.
struct GatewayDeps {
  const tokenizer::Tokenizer& tokenizer;
  GenerateBackend& backend;
  common::Clock& clock;
  common::metrics::Registry& registry;
};

// The speech services and the timers the voice endpoints use; everything must outlive the
// gateway. Without them (Create's default) the voice endpoints answer 503.
struct GatewayVoiceDeps {
  AsrClient& asr;
  TtsClient& tts;
  TimerQueue& timers;
};

class Gateway {
 public:
  // Everything in `deps` must outlive the Gateway. kInvalidArgument for bad options or a chat
  // template that does not parse.
  static absl::StatusOr<std::unique_ptr<Gateway>> Create(
      const GatewayOptions& options, const ModelInfo& model, GatewayDeps deps,
      std::optional<GatewayVoiceDeps> voice = std::nullopt);
  ~Gateway();

  // Handles one request. The answer goes to `writer` (perhaps later, from another thread); the
  // returned function (empty when already answered) cancels the request when the client leaves.
  CancelFn Handle(HttpRequest request, std::shared_ptr<ResponseWriter> writer);
  // Handles a WebSocket upgrade request (GET /v1/realtime): the session, or the HTTP answer
  // refusing it (404 elsewhere, 401/429 as for API calls, 503 draining or without voice).
  UpgradeResult Upgrade(HttpRequest request, std::shared_ptr<WebSocketWriter> writer);

  // Refuse new generations (503) and report not ready; in-flight ones go on.
  void StartDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Generations in progress.
  int64_t in_flight() const { return in_flight_.in_flight(); }

  const ModelInfo& model() const { return model_; }
  const grammar::GrammarCache& grammar_cache() const { return *grammar_; }
  ToolCallFormat tool_call_format() const { return tool_format_; }
  GatewayMetrics& metrics() { return metrics_; }

 private:
  Gateway(const GatewayOptions& options, const ModelInfo& model, GatewayDeps deps,
          std::optional<GatewayVoiceDeps> voice, std::unique_ptr<ApiKeyStore> api_keys,
          std::unique_ptr<PromptBuilder> prompts, std::unique_ptr<grammar::GrammarCache> grammar,
          ToolCallFormat tool_format, common::metrics::MetricsAuth metrics_auth);

  CancelFn HandleCompletion(Endpoint endpoint, const HttpRequest& request,
                            const std::shared_ptr<ResponseWriter>& writer);
  CancelFn HandleAudio(const std::string& path, const HttpRequest& request,
                       const std::shared_ptr<ResponseWriter>& writer);
  HttpResponse HandleModels() const;
  HttpResponse HandleTokenize(const HttpRequest& request) const;
  HttpResponse HandleDetokenize(const HttpRequest& request) const;
  // The API key check and the rate limit; nullopt when the request may go on. `key` (may be
  // null) receives the caller's key when auth is on.
  std::optional<ApiError> CheckAccess(const HttpRequest& request,
                                      std::shared_ptr<const ApiKey>* key = nullptr);
  std::optional<ApiError> CheckPromptIds(const CompletionRequest& request,
                                         const std::vector<int32_t>& prompt) const;
  void Reply(ResponseWriter& writer, HttpResponse response);
  void Reject(ResponseWriter& writer, const ApiError& error, const char* reason);
  std::string NewRequestId(const char* prefix);

  // Constant after construction.
  const GatewayOptions options_;
  const ModelInfo model_;
  const GatewayDeps deps_;
  const std::optional<GatewayVoiceDeps> voice_;
  const std::unique_ptr<ApiKeyStore> api_keys_;  // null: auth off
  const std::unique_ptr<PromptBuilder> prompts_;
  const std::unique_ptr<grammar::GrammarCache> grammar_;
  const ToolCallFormat tool_format_;
  const common::metrics::MetricsAuth metrics_auth_;  // /metrics on the HTTP port
  const RequestLimits request_limits_;
  const uint64_t id_seed_;

  GatewayMetrics metrics_;
  VoiceMetrics voice_metrics_;
  std::unique_ptr<AudioEndpoints> audio_;  // with voice_
  RateLimiter rate_limiter_;
  InFlightLimiter in_flight_;
  std::atomic<bool> draining_{false};
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace moe::gateway
