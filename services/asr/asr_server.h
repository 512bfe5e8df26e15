// The ASR service's gRPC face (moe.asr.v1.Asr): the Transcribe stream converted to and from the
// core (AsrCore / AsrStream), absl -> gRPC status. A synchronous bidirectional method: each
// stream holds a gRPC thread while it lasts (streams are bounded by core.max_streams, and the
// thread reading a chunk decodes it, so a client that sends faster than real time is slowed by
// flow control, never buffered).
//
// Thread-safe (gRPC threads call it). Borrows `core`.
#pragma once

#include <string>

#include "common/config/schema.h"
#include "common/grpc/auth.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "moe/asr/v1/asr.grpc.pb.h"
#include "services/asr/core/asr_core.h"
#include "services/asr/pocketsphinx_decoder.h"

namespace moe::asr {

// Everything main.cc reads from --config / --set.
struct AsrOptions {
  AsrCoreOptions core;
  PocketsphinxOptions engine;
  common::rpc::ServerOptions grpc;
  common::metrics::MetricsServerOptions metrics;
  std::string log_level = "info";

  static void Describe(common::config::Schema<AsrOptions>& s) {
    s.Section("core", &AsrOptions::core);
    s.Section("engine", &AsrOptions::engine);
    s.Section("grpc", &AsrOptions::grpc);
    s.Section("metrics", &AsrOptions::metrics);
    s.Add("log_level", &AsrOptions::log_level, "trace|debug|info|warn|error|off");
  }
  absl::Status Validate() const;
};

// proto -> core (the message names the field). kInvalidArgument for an unknown mode.
absl::StatusOr<StreamConfig> StreamConfigFromProto(const moe::asr::v1::RecognitionConfig& config);
moe::asr::v1::TranscribeResponse EventToProto(const AsrEvent& event);

// Who may call it (common/grpc/auth.h; SECURITY.md): the gateway.
inline constexpr common::rpc::MethodPolicy kTranscribePolicy{"Transcribe",
                                                             {common::rpc::Role::kGateway}};
inline constexpr common::rpc::MethodPolicy kAsrServerPolicies[] = {kTranscribePolicy};

class AsrServer final : public moe::asr::v1::Asr::Service {
 public:
  explicit AsrServer(AsrCore& core) : core_(core) {}
  // Checks the method's policy with `auth` (main: the Authorizer of grpc.auth). Default: every
  // caller this server accepts (tests of the core behind it).
  void SetAuthorizer(const common::rpc::Authorizer& auth) { auth_ = &auth; }

  // moe::asr::v1::Asr::Service
  ::grpc::Status Transcribe(
      ::grpc::ServerContext* context,
      ::grpc::ServerReaderWriter<moe::asr::v1::TranscribeResponse, moe::asr::v1::TranscribeRequest>*
          stream) override;

 private:
  AsrCore& core_;
  const common::rpc::Authorizer* auth_ = nullptr;
};

}  // namespace moe::asr
