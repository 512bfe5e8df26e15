// The gateway's configuration (YAML + `--set` overrides via common/config). Every key:
//   gateway --help
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grpc/options.h"

namespace moe::gateway {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int32_t port = 8000;  // 0 picks a free port (printed in the "listening" line)
  int32_t io_threads = 2;
  int32_t max_connections = 4096;    // past this, new connections are closed at once
  int64_t max_body_bytes = 1 << 20;  // larger bodies: 413
  int32_t max_header_bytes = 16 << 10;
  absl::Duration idle_timeout = absl::Seconds(60);   // keep-alive connections between requests
  absl::Duration drain_timeout = absl::Seconds(30);  // SIGTERM: grace for in-flight requests

  static void Describe(common::config::Schema<HttpOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

struct LimitOptions {
  int32_t max_in_flight = 1024;   // generations at once; past this: 503 + Retry-After
  double rate_limit_rps = 0;      // per key (API key, else client address); 0 = off
  double rate_limit_burst = 20;   // bucket size
  int32_t max_prompt_tokens = 0;  // 0 = the model's context length
  int32_t retry_after_s = 1;      // Retry-After for 503
  int32_t max_stop_strings = 16;

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
  // How the gateway dials the routers: TLS / mTLS (the gateway's client certificate) or a
  // token file (common/grpc/auth.h).
  common::rpc::ChannelOptions channel;

  static void Describe(common::config::Schema<RoutingOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

struct GatewayOptions {
  std::string model_dir;      // tokenizer.json, tokenizer_config.json, config.json
  std::string model_id;       // served name ("" = the model directory's base name)
  int32_t max_model_len = 0;  // context length ("" = config.json max_position_embeddings)
  std::string fallback_chat_template = "chatml";  // when the model ships none
  int32_t default_max_tokens = 0;  // when a request sets none; 0 = up to the context length
  std::string log_level = "info";
  HttpOptions http;
  LimitOptions limits;
  AuthOptions auth;
  RoutingOptions routing;

  static void Describe(common::config::Schema<GatewayOptions>& s);
  absl::Status Validate() const;
};

}  // namespace moe::gateway
