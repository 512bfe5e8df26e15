// AsrClient and TtsClient over the asr and tts services' bidirectional gRPC streams
// (proto/moe/{asr,tts}/v1), with gRPC's callback API: no thread per stream. Each call keeps at
// most one write in flight and queues the rest, bounded by `max_queued_bytes` (past it the call
// fails with kResourceExhausted: the service cannot keep up). Several targets are used round
// robin, one per call; a call that the service refuses as busy (RESOURCE_EXHAUSTED) or that
// cannot reach it (UNAVAILABLE) before any answer fails with that status (the caller decides:
// the realtime session reopens on the next audio, an HTTP request gets 503).
//
// Thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grpc/options.h"
#include "services/gateway/core/voice_backend.h"

namespace moe::gateway {

struct VoiceClientOptions {
  std::vector<std::string> targets;  // "host:port" of the service's replicas; empty = none
  int64_t max_queued_bytes = 8 << 20;
  common::rpc::ChannelOptions channel;  // TLS / mTLS / token (common/grpc/auth.h)
};

// With no targets, `configured()` is false and every call ends at once with kUnavailable.
absl::StatusOr<std::unique_ptr<AsrClient>> CreateGrpcAsrClient(const VoiceClientOptions& options);
absl::StatusOr<std::unique_ptr<TtsClient>> CreateGrpcTtsClient(const VoiceClientOptions& options);

}  // namespace moe::gateway
