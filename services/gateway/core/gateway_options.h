// The gateway's configuration (YAML + `--set` overrides via common/config). Every key:
//   gateway --help
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grammar/grammar_cache.h"
#include "common/grpc/options.h"
#include "common/metrics/metrics_server.h"

namespace moe::gateway {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int32_t port = 8000;  // 0 picks a free port (printed in the "listening" line)
  int32_t io_threads = 2;
  // Past this, a new connection gets 503 + Retry-After (its request unread) and is closed.
  int32_t max_connections = 4096;
  int64_t max_body_bytes = 1 << 20;  // larger bodies: 413
  // multipart/form-data bodies (audio uploads): OpenAI's 25 MB file limit plus the form.
  int64_t max_upload_bytes = 26 << 20;
  int64_t max_ws_message_bytes = 8 << 20;            // one WebSocket message (base64 audio)
  int64_t max_ws_send_queue_bytes = 16 << 20;        // unsent WebSocket output; past it: close 1008
  int32_t max_header_bytes = 16 << 10;               // request line + headers; past it: 431
  int32_t max_header_fields = 100;                   // header lines per request; past it: 431
  absl::Duration idle_timeout = absl::Seconds(60);   // keep-alive connections between requests
  absl::Duration drain_timeout = absl::Seconds(30);  // SIGTERM: grace for in-flight requests
  // A client that stops reading: past this many response bytes queued on its connection, or when
  // one write makes no progress for write_timeout, the connection is closed and its generation
  // cancelled (the in-flight slot and the router's stream are freed).
  int64_t max_pending_write_bytes = 4 << 20;
  absl::Duration write_timeout = absl::Seconds(30);
  // Back-pressure before that cut: while more than this many bytes of a stream are unsent, the
  // gateway stops reading its router stream (so the router stops decoding it, its
  // stream_capacity full) and reads on once the client has caught up. 0 = half of
  // max_pending_write_bytes; otherwise less than it.
  int64_t stream_read_pause_bytes = 0;
  // Retry-After of the 503 past max_connections: not a config key, the gateway copies
  // limits.retry_after_s here (GatewayOptions::Validate's caller, main.cc).
  int32_t retry_after_s = 1;

  static void Describe(common::config::Schema<HttpOptions>& s);
  absl::Status Validate() const;
  // stream_read_pause_bytes, or its default.
  int64_t EffectiveStreamReadPauseBytes() const {
    return stream_read_pause_bytes > 0 ? stream_read_pause_bytes : max_pending_write_bytes / 2;
  }
};

// Load limits (503 / 429) and the sizes a client controls in a request body: past one of these a
// request is refused with 400 limit_exceeded naming the field (`param`) and the option
// (ApiError::LimitExceeded). The README's limits table lists every one.
struct LimitOptions {
  int32_t max_in_flight = 1024;   // generations at once; past this: 503 + Retry-After
  double rate_limit_rps = 0;      // per key (API key, else client address); 0 = off
  double rate_limit_burst = 20;   // bucket size
  int32_t max_prompt_tokens = 0;  // 0 = the model's context length
  // max_tokens / max_completion_tokens at most; 0 = what the context leaves. A request without
  // one is capped here.
  int32_t max_tokens = 0;
  int32_t retry_after_s = 1;  // Retry-After for 503
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t max_stop_token_ids = 64;  // the routers refuse more
  int32_t max_logit_bias_entries = 1024;
  int32_t max_messages = 4096;    // chat messages per request
  int32_t max_tools = 128;        // function tools per request (OpenAI's limit)
  int32_t max_top_logprobs = 20;  // chat top_logprobs (OpenAI's 20); completions logprobs <= 5

  static void Describe(common::config::Schema<LimitOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// API keys (core/api_keys.h): stored as SHA-256 digests, never in plaintext.
struct AuthOptions {
  // Accepted keys as digests ("sha256:<hex>", from `moe hash-key`), with the gateway's default
  // limits; empty (and no file) = auth off.
  std::vector<std::string> api_keys;
  // Key file: one digest a line with per-key limits (core/api_keys.h); reloaded on change.
  std::string api_keys_file;
  absl::Duration api_keys_reload_interval = absl::Seconds(5);
  // Without auth there is no key to allow a request `priority`: honour it anyway? (A local
  // cluster, a trusted network.) Otherwise a non-zero priority without an allowing key is 403.
  bool priority_without_key = false;

  static void Describe(common::config::Schema<AuthOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

struct RoutingOptions {
  std::vector<std::string> routers;  // gRPC targets "host:port" of the routers
  int32_t block_size = 16;           // the routers' KV block size (affinity hashing)
  std::string kv_dtype = "f32";      // the routers' KV dtype (affinity hashing)
  int32_t affinity_blocks = 4;
  double queue_scale = 8;
  double load_slack = 0.5;
  absl::Duration stats_interval = absl::Milliseconds(500);  // GetStats polling
  absl::Duration connect_timeout = absl::Seconds(2);
  int32_t max_attempts = 3;  // routers tried before the first token
  // One GenerateBatch stream per router for all requests, answered with one message per router
  // step (router.proto), instead of one Generate call per request and one message per token.
  bool batch_stream = true;
  // Items a request may have in flight on a batch stream before the gateway credits them back
  // (its flow control; a client behind holds only its own request).
  int32_t batch_window = 16;
  // How the gateway dials the routers: TLS / mTLS (the gateway's client certificate) or a
  // token file (common/grpc/auth.h). A small HTTP/2 window (stream_window_bytes, 16 KiB: a few
  // hundred tokens, far more than a stream's rate needs per round trip) so that a paused stream
  // (a client behind: http.stream_read_pause_bytes) stops the router decoding it soon. With
  // batch_stream the window is not used (gRPC's default; the credit windows bound each request).
  common::rpc::ChannelOptions channel{.stream_window_bytes = 16 << 10};

  static void Describe(common::config::Schema<RoutingOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// The realtime API's sessions (/v1/realtime).
struct RealtimeOptions {
  // Conversation items kept per session (oldest dropped first; the prompt is also cut from
  // the oldest item to fit the context).
  int32_t max_items = 64;
  // Tokens per response when the client sets no max_output_tokens ("inf"), and the cap on it.
  int32_t max_response_tokens = 512;
  // Audio sent ahead of real time: a response's audio deltas go out as fast as synthesized up
  // to this lead, then at the speed they play. Bounds the client's buffer, and keeps a reply
  // "in progress" while it plays, so that the user speaking (barge-in) cancels it.
  absl::Duration audio_lead = absl::Seconds(1);
  // Prefill the stable part of the partial transcript while the user speaks (router
  // prefill_only; the prefix cache keeps it), so that at the end of speech only the rest is
  // prefilled.
  bool speculative_prefill = true;
  // New stable characters before another speculative prefill.
  int32_t speculative_min_chars = 12;
  absl::Duration max_session = absl::Minutes(30);  // then the session is closed
  // Uncommitted audio without turn detection (the client commits): past it an append is refused
  // with an error event (input_audio_buffer_too_large) and dropped. With server VAD the asr
  // service's endpointer bounds each utterance (its max_utterance).
  absl::Duration max_input_audio_buffer = absl::Minutes(5);
  // Turn detection's pause when the client sets none (the asr service's endpoint).
  absl::Duration silence_duration = absl::Milliseconds(300);
  std::string instructions = "You are a helpful voice assistant. Answer briefly.";
  std::string voice = "alloy";
  double temperature = 0.8;

  static void Describe(common::config::Schema<RealtimeOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// The speech endpoints and the realtime API: where asr and tts run, and their limits.
struct VoiceOptions {
  std::vector<std::string> asr;  // gRPC targets of the asr service; empty = no transcription
  std::vector<std::string> tts;  // gRPC targets of the tts service; empty = no speech
  // How the gateway dials asr and tts: TLS / mTLS (its client certificate) or a token file.
  common::rpc::ChannelOptions channel;
  // Model names accepted in addition to our engines' ("pocketsphinx", "espeak-ng"): the names
  // OpenAI clients send by default.
  std::vector<std::string> transcription_models = {"whisper-1", "gpt-4o-transcribe",
                                                   "gpt-4o-mini-transcribe"};
  std::vector<std::string> speech_models = {"tts-1", "tts-1-hd", "gpt-4o-mini-tts"};
  std::vector<std::string> realtime_models = {"gpt-realtime", "gpt-realtime-mini",
                                              "gpt-4o-realtime-preview",
                                              "gpt-4o-mini-realtime-preview"};
  absl::Duration max_transcription_audio = absl::Minutes(15);  // longer uploads: 400
  int32_t max_speech_input_chars = 4096;                       // OpenAI's limit
  // Queued audio / text per asr or tts stream, bytes (a service that does not keep up).
  int64_t max_queued_bytes = 48 << 20;
  RealtimeOptions realtime;

  static void Describe(common::config::Schema<VoiceOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// Where the gateway's /metrics is served. By default on the HTTP port (beside the API); with
// separate_port, on its own port (host, port: common/metrics' MetricsServer, as every other
// service) and the HTTP port answers 404 for /metrics. bearer_token_file protects it on either
// port (401 without the token).
struct GatewayMetricsOptions {
  bool separate_port = false;
  std::string host = "0.0.0.0";  // separate_port only
  int32_t port = 0;              // separate_port only; 0 picks a free one (the listening line)
  std::string bearer_token_file;

  common::metrics::MetricsServerOptions server() const {
    return {.host = host, .port = port, .bearer_token_file = bearer_token_file};
  }
  static void Describe(common::config::Schema<GatewayMetricsOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

struct GatewayOptions {
  std::string model_dir;      // tokenizer.json, tokenizer_config.json, config.json
  std::string model_id;       // served name ("" = the model directory's base name)
  int32_t max_model_len = 0;  // context length ("" = config.json max_position_embeddings)
  std::string fallback_chat_template = "chatml";  // when the model ships none
  int32_t default_max_tokens = 0;  // when a request sets none; 0 = up to the context length
  std::string log_level = "info";
  // How `tools` calls look in the model's output with tool_choice auto (core/tool_calls.h):
  // auto (from the chat template) | none | mistral | hermes | llama3.
  std::string tool_call_format = "auto";
  HttpOptions http;
  LimitOptions limits;
  AuthOptions auth;
  RoutingOptions routing;
  VoiceOptions voice;
  GatewayMetricsOptions metrics;
  // Constraints (response_format, tools) are compiled here too, to refuse a bad schema with a 400
  // before routing; the routers compile their own copy.
  grammar::GrammarCacheOptions grammar;

  static void Describe(common::config::Schema<GatewayOptions>& s);
  absl::Status Validate() const;
};

}  // namespace moe::gateway
