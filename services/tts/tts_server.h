// The TTS service's gRPC face (moe.tts.v1.Tts): the Synthesize stream converted to and from the
// core (TtsCore / TtsStream), absl -> gRPC status. A synchronous bidirectional method: the
// thread reading a text piece speaks the segments it completes and writes their audio (a slow
// reader slows the synthesis through flow control; nothing is buffered past a segment).
//
// Thread-safe (gRPC threads call it). Borrows `core`.
#pragma once

#include <string>

#include "common/config/schema.h"
#include "common/grpc/auth.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "moe/tts/v1/tts.grpc.pb.h"
#include "services/tts/core/tts_core.h"
#include "services/tts/espeak_synthesizer.h"

namespace moe::tts {

// Everything main.cc reads from --config / --set.
struct TtsOptions {
  TtsCoreOptions core;
  EspeakOptions engine;
  common::rpc::ServerOptions grpc;
  common::metrics::MetricsServerOptions metrics;
  std::string log_level = "info";

  static void Describe(common::config::Schema<TtsOptions>& s) {
    s.Section("core", &TtsOptions::core);
    s.Section("engine", &TtsOptions::engine);
    s.Section("grpc", &TtsOptions::grpc);
    s.Section("metrics", &TtsOptions::metrics);
    s.Add("log_level", &TtsOptions::log_level, "trace|debug|info|warn|error|off");
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// Who may call it (common/grpc/auth.h; SECURITY.md): the gateway.
inline constexpr common::rpc::MethodPolicy kSynthesizePolicy{"Synthesize",
                                                             {common::rpc::Role::kGateway}};
inline constexpr common::rpc::MethodPolicy kTtsServerPolicies[] = {kSynthesizePolicy};

class TtsServer final : public moe::tts::v1::Tts::Service {
 public:
  explicit TtsServer(TtsCore& core) : core_(core) {}
  // Checks the method's policy with `auth` (main: the Authorizer of grpc.auth). Default: every
  // caller this server accepts (tests of the core behind it).
  void SetAuthorizer(const common::rpc::Authorizer& auth) { auth_ = &auth; }

  // moe::tts::v1::Tts::Service
  ::grpc::Status Synthesize(
      ::grpc::ServerContext* context,
      ::grpc::ServerReaderWriter<moe::tts::v1::SynthesizeResponse, moe::tts::v1::SynthesizeRequest>*
          stream) override;

 private:
  TtsCore& core_;
  const common::rpc::Authorizer* auth_ = nullptr;
};

}  // namespace moe::tts
