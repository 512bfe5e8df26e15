// `tts`: flags -> TtsOptions -> Validate -> espeak-ng -> gRPC server -> SERVING + listening
// line -> wait for SIGTERM -> drain (open streams get grpc.drain_timeout to end).
//
//   tts --set grpc.port=0 --set metrics.port=0
//   tts --config tts.yaml --set core.first_chunk_max_chars=32
#include <memory>

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/config/loader.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "services/tts/core/tts_core.h"
#include "services/tts/espeak_synthesizer.h"
#include "services/tts/tts_server.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"port", "grpc.port"},
    {"metrics_port", "metrics.port"},
};

absl::Status Run(int argc, char** argv) {
  auto loaded = common::config::LoadServiceOptions<tts::TtsOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  std::optional<tts::TtsOptions>& options = *loaded;
  common::SetLogLevel(options->log_level);

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  auto synthesizer = tts::EspeakSynthesizer::Create(options->engine);
  if (!synthesizer.ok()) return synthesizer.status();
  if (absl::Status s = (*synthesizer)->CheckVoice(options->core.default_voice); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("core.default_voice: ", s.message()));
  }
  tts::TtsCore core(options->core, **synthesizer, clock, registry);
  tts::TtsServer service(core);
  auto auth = common::rpc::Authorizer::Create(options->grpc.auth, "tts", registry, clock);
  if (!auth.ok()) return auth.status();
  service.SetAuthorizer(**auth);
  common::rpc::ServerRunner runner(options->grpc);
  runner.AddService(&service, moe::tts::v1::Tts::service_full_name());
  if (absl::Status s = runner.Start(); !s.ok()) return s;
  auto metrics_server = common::metrics::MetricsServer::Start(options->metrics, registry);
  if (!metrics_server.ok()) return metrics_server.status();
  runner.SetServing(true);
  common::PrintListeningLine({.grpc = runner.port(), .metrics = (*metrics_server)->port()});
  MOE_LOG_INFO("tts: espeak-ng at {} Hz, voice {}, gRPC port {}, metrics port {}",
               (*synthesizer)->sample_rate(), options->core.default_voice, runner.port(),
               (*metrics_server)->port());

  const int signo = common::rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("tts: signal {}, draining", signo);
  runner.Shutdown(clock.Now() + options->grpc.drain_timeout);
  (*metrics_server)->Stop();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) { return moe::common::rpc::ServiceMain("tts", argc, argv, Run); }
