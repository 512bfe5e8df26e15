#include "services/gateway/core/gateway_options.h"

namespace moe::gateway {

namespace config = common::config;

void HttpOptions::Describe(config::Schema<HttpOptions>& s) {
  s.Add("host", &HttpOptions::host, "address to bind").NonEmpty();
  s.Add("port", &HttpOptions::port, "HTTP port; 0 picks a free one").Range(0, 65535);
  s.Add("io_threads", &HttpOptions::io_threads, "threads serving sockets").Range(1, 256);
  s.Add("max_connections", &HttpOptions::max_connections, "open connections at most")
      .Range(1, 1 << 20);
  s.Add("max_body_bytes", &HttpOptions::max_body_bytes, "request body limit (413 past it)")
      .Range(1024, int64_t{1} << 30);
  s.Add("max_upload_bytes", &HttpOptions::max_upload_bytes,
        "multipart/form-data body limit (audio uploads; 413 past it)")
      .Range(1024, int64_t{4} << 30);
  s.Add("max_ws_message_bytes", &HttpOptions::max_ws_message_bytes,
        "largest WebSocket message received")
      .Range(1024, int64_t{1} << 30);
  s.Add("max_ws_send_queue_bytes", &HttpOptions::max_ws_send_queue_bytes,
        "unsent WebSocket output before the socket is closed (a client not reading)")
      .Range(1024, int64_t{4} << 30);
  s.Add("max_header_bytes", &HttpOptions::max_header_bytes,
        "request line + header bytes (431 past it)")
      .Range(1024, 1 << 20);
  s.Add("max_header_fields", &HttpOptions::max_header_fields,
        "header lines per request (431 past it)")
      .Range(8, 10000);
  s.Add("idle_timeout", &HttpOptions::idle_timeout, "keep-alive idle timeout")
      .Min(absl::Milliseconds(1));
  s.Add("drain_timeout", &HttpOptions::drain_timeout, "grace for in-flight requests on SIGTERM")
      .Min(absl::ZeroDuration());
  s.Add("max_pending_write_bytes", &HttpOptions::max_pending_write_bytes,
        "response bytes queued for a slow client before its connection is closed")
      .Range(4096, int64_t{1} << 30);
  s.Add("write_timeout", &HttpOptions::write_timeout,
        "a write that makes no progress this long closes the connection")
      .Min(absl::Milliseconds(1));
  s.Add("stream_read_pause_bytes", &HttpOptions::stream_read_pause_bytes,
        "unsent stream bytes above which the router stream is not read (back-pressure); "
        "0 = max_pending_write_bytes / 2")
      .Range(0, int64_t{1} << 30);
}

absl::Status HttpOptions::Validate() const {
  if (absl::Status s = config::CheckFields(*this); !s.ok()) return s;
  if (stream_read_pause_bytes >= max_pending_write_bytes) {
    return absl::InvalidArgumentError(
        "http.stream_read_pause_bytes must be less than http.max_pending_write_bytes (the reads "
        "pause before the connection is cut)");
  }
  return absl::OkStatus();
}

void LimitOptions::Describe(config::Schema<LimitOptions>& s) {
  s.Add("max_in_flight", &LimitOptions::max_in_flight, "generations at once (503 past it)")
      .Range(1, 1 << 24);
  s.Add("rate_limit_rps", &LimitOptions::rate_limit_rps, "requests/s per key; 0 = off").Min(0.0);
  s.Add("rate_limit_burst", &LimitOptions::rate_limit_burst, "token bucket size").Min(1.0);
  s.Add("max_prompt_tokens", &LimitOptions::max_prompt_tokens,
        "prompt tokens at most; 0 = the context length")
      .Min(0);
  s.Add("max_tokens", &LimitOptions::max_tokens,
        "max_tokens / max_completion_tokens at most; 0 = what the context leaves")
      .Min(0);
  s.Add("retry_after_s", &LimitOptions::retry_after_s, "Retry-After of 503 answers").Range(1, 3600);
  s.Add("max_stop_strings", &LimitOptions::max_stop_strings, "stop strings per request")
      .Range(0, 1024);
  s.Add("max_stop_string_bytes", &LimitOptions::max_stop_string_bytes, "bytes per stop string")
      .Range(1, 1 << 16);
  s.Add("max_stop_token_ids", &LimitOptions::max_stop_token_ids,
        "stop_token_ids per request (the routers allow 64)")
      .Range(0, 64);
  s.Add("max_logit_bias_entries", &LimitOptions::max_logit_bias_entries,
        "logit_bias entries per request")
      .Range(0, 1 << 20);
  s.Add("max_messages", &LimitOptions::max_messages, "chat messages per request").Range(1, 1 << 20);
  s.Add("max_tools", &LimitOptions::max_tools, "function tools per request").Range(0, 4096);
  s.Add("max_top_logprobs", &LimitOptions::max_top_logprobs,
        "chat top_logprobs at most (completions logprobs: min(5, this))")
      .Range(0, 20);
}

void AuthOptions::Describe(config::Schema<AuthOptions>& s) {
  s.Add("api_keys", &AuthOptions::api_keys,
        "accepted API keys as sha256:<hex> digests (moe hash-key); empty = auth off");
  s.Add("api_keys_file", &AuthOptions::api_keys_file,
        "file of API key digests with per-key limits, one a line; reloaded on change");
  s.Add("api_keys_reload_interval", &AuthOptions::api_keys_reload_interval,
        "how often the key file is checked for a change")
      .Range(absl::Milliseconds(10), absl::Hours(1));
  s.Add("priority_without_key", &AuthOptions::priority_without_key,
        "honour request priority when auth is off");
}

void RoutingOptions::Describe(config::Schema<RoutingOptions>& s) {
  s.Add("routers", &RoutingOptions::routers, "router gRPC targets host:port");
  s.Section("channel", &RoutingOptions::channel);
  s.Add("block_size", &RoutingOptions::block_size, "routers' KV block size").Range(1, 4096);
  s.Add("kv_dtype", &RoutingOptions::kv_dtype, "routers' KV dtype")
      .Require([](const std::string& v) { return v == "f32" || v == "bf16" || v == "f16"; },
               "is not one of f32|bf16|f16");
  s.Add("affinity_blocks", &RoutingOptions::affinity_blocks, "prefix blocks in the affinity key")
      .Range(0, 1 << 16);
  s.Add("queue_scale", &RoutingOptions::queue_scale, "queued requests per unit of load").Min(0.001);
  s.Add("load_slack", &RoutingOptions::load_slack, "extra load tolerated for affinity").Min(0.0);
  s.Add("stats_interval", &RoutingOptions::stats_interval, "GetStats polling period")
      .Min(absl::Milliseconds(10));
  s.Add("connect_timeout", &RoutingOptions::connect_timeout, "GetStats deadline")
      .Min(absl::Milliseconds(10));
  s.Add("max_attempts", &RoutingOptions::max_attempts, "routers tried before the first token")
      .Range(1, 64);
  s.Add("batch_stream", &RoutingOptions::batch_stream,
        "one GenerateBatch stream per router (one message per step), not a call per request");
  s.Add("batch_window", &RoutingOptions::batch_window,
        "items per request in flight on a batch stream before credit")
      .Range(2, 1024);
}

void RealtimeOptions::Describe(config::Schema<RealtimeOptions>& s) {
  s.Add("max_items", &RealtimeOptions::max_items, "conversation items kept per session")
      .Range(2, 4096);
  s.Add("max_response_tokens", &RealtimeOptions::max_response_tokens,
        "tokens per response (default and cap)")
      .Range(1, 1 << 20);
  s.Add("audio_lead", &RealtimeOptions::audio_lead, "audio sent ahead of real time")
      .Range(absl::Milliseconds(100), absl::Minutes(10));
  s.Add("speculative_prefill", &RealtimeOptions::speculative_prefill,
        "prefill the stable partial transcript while the user speaks");
  s.Add("speculative_min_chars", &RealtimeOptions::speculative_min_chars,
        "new stable characters before another speculative prefill")
      .Range(1, 1 << 16);
  s.Add("max_session", &RealtimeOptions::max_session, "longest session")
      .Range(absl::Seconds(1), absl::Hours(24));
  s.Add("max_input_audio_buffer", &RealtimeOptions::max_input_audio_buffer,
        "uncommitted input audio without turn detection")
      .Range(absl::Milliseconds(200), absl::Hours(1));
  s.Add("silence_duration", &RealtimeOptions::silence_duration,
        "turn detection pause when the client sets none")
      .Range(absl::Milliseconds(100), absl::Seconds(5));
  s.Add("instructions", &RealtimeOptions::instructions, "system prompt when the client sets none");
  s.Add("voice", &RealtimeOptions::voice, "voice when the client sets none").NonEmpty();
  s.Add("temperature", &RealtimeOptions::temperature, "sampling temperature default")
      .Range(0.0, 2.0);
}

void VoiceOptions::Describe(config::Schema<VoiceOptions>& s) {
  s.Add("asr", &VoiceOptions::asr, "asr service gRPC targets host:port");
  s.Add("tts", &VoiceOptions::tts, "tts service gRPC targets host:port");
  s.Section("channel", &VoiceOptions::channel);
  s.Add("transcription_models", &VoiceOptions::transcription_models,
        "model names accepted by /v1/audio/transcriptions besides pocketsphinx");
  s.Add("speech_models", &VoiceOptions::speech_models,
        "model names accepted by /v1/audio/speech besides espeak-ng");
  s.Add("realtime_models", &VoiceOptions::realtime_models,
        "model names accepted by /v1/realtime besides the served model");
  s.Add("max_transcription_audio", &VoiceOptions::max_transcription_audio, "longest audio upload")
      .Range(absl::Seconds(1), absl::Hours(10));
  s.Add("max_speech_input_chars", &VoiceOptions::max_speech_input_chars,
        "longest /v1/audio/speech input")
      .Range(1, 1 << 24);
  s.Add("max_queued_bytes", &VoiceOptions::max_queued_bytes, "queued bytes per asr/tts stream")
      .Range(1 << 16, int64_t{1} << 32);
  s.Section("realtime", &VoiceOptions::realtime);
}

void GatewayMetricsOptions::Describe(config::Schema<GatewayMetricsOptions>& s) {
  s.Add("separate_port", &GatewayMetricsOptions::separate_port,
        "serve /metrics on its own port instead of the HTTP port");
  s.Add("host", &GatewayMetricsOptions::host, "metrics address (separate_port)").NonEmpty();
  s.Add("port", &GatewayMetricsOptions::port, "metrics port (separate_port); 0 picks a free one")
      .Range(0, 65535);
  s.Add("bearer_token_file", &GatewayMetricsOptions::bearer_token_file,
        "token file /metrics scrapes must present as a bearer token; empty = open");
}

void GatewayOptions::Describe(config::Schema<GatewayOptions>& s) {
  s.Add("model_dir", &GatewayOptions::model_dir, "model directory (tokenizer, config.json)");
  s.Add("model_id", &GatewayOptions::model_id, "served model name; empty = dir base name");
  s.Add("max_model_len", &GatewayOptions::max_model_len, "context length; 0 = from config.json")
      .Min(0);
  s.Add("fallback_chat_template", &GatewayOptions::fallback_chat_template,
        "built-in template when the model has none: chatml|mistral|llama3|plain");
  s.Add("default_max_tokens", &GatewayOptions::default_max_tokens,
        "max_tokens when a request sets none; 0 = up to the context")
      .Min(0);
  s.Add("log_level", &GatewayOptions::log_level, "trace|debug|info|warn|error|off");
  s.Add("tool_call_format", &GatewayOptions::tool_call_format,
        "tool calls in the output (tool_choice auto): auto|none|mistral|hermes|llama3");
  s.Section("http", &GatewayOptions::http);
  s.Section("limits", &GatewayOptions::limits);
  s.Section("auth", &GatewayOptions::auth);
  s.Section("routing", &GatewayOptions::routing);
  s.Section("voice", &GatewayOptions::voice);
  s.Section("metrics", &GatewayOptions::metrics);
  s.Section("grammar", &GatewayOptions::grammar);
}

absl::Status GatewayOptions::Validate() const {
  if (absl::Status s = config::CheckFields(*this); !s.ok()) return s;
  if (model_dir.empty()) return absl::InvalidArgumentError("model_dir: must be set");
  if (routing.routers.empty()) {
    return absl::InvalidArgumentError("routing.routers: at least one router is needed");
  }
  return absl::OkStatus();
}

}  // namespace moe::gateway
