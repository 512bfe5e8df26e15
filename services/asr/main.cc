// `asr`: flags -> AsrOptions -> Validate -> core.max_streams pocketsphinx decoders (the models
// load here) -> gRPC server (NOT_SERVING) -> SERVING + listening line -> wait for SIGTERM ->
// drain (open streams get grpc.drain_timeout to end).
//
//   asr --set grpc.port=0 --set metrics.port=0
//   asr --config asr.yaml --set core.max_streams=8
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
#include "services/asr/asr_server.h"
#include "services/asr/core/asr_core.h"
#include "services/asr/pocketsphinx_decoder.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"port", "grpc.port"},
    {"metrics_port", "metrics.port"},
    {"streams", "core.max_streams"},
};

absl::Status Run(int argc, char** argv) {
  auto loaded = common::config::LoadServiceOptions<asr::AsrOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  std::optional<asr::AsrOptions>& options = *loaded;
  common::SetLogLevel(options->log_level);

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  const absl::Time load_start = clock.Now();
  auto pool = asr::DecoderPool::Create(
      options->core.max_streams, [&] { return asr::CreatePocketsphinxDecoder(options->engine); });
  if (!pool.ok()) return pool.status();
  asr::AsrCore core(options->core, *std::move(pool), clock, registry);
  asr::AsrServer service(core);
  auto auth = common::rpc::Authorizer::Create(options->grpc.auth, "asr", registry, clock);
  if (!auth.ok()) return auth.status();
  service.SetAuthorizer(**auth);
  common::rpc::ServerRunner runner(options->grpc);
  runner.AddService(&service, moe::asr::v1::Asr::service_full_name());
  if (absl::Status s = runner.Start(); !s.ok()) return s;
  auto metrics_server = common::metrics::MetricsServer::Start(options->metrics, registry);
  if (!metrics_server.ok()) return metrics_server.status();
  runner.SetServing(true);
  common::PrintListeningLine({.grpc = runner.port(), .metrics = (*metrics_server)->port()});
  MOE_LOG_INFO("asr: {} pocketsphinx decoders ({}) loaded in {}, gRPC port {}, metrics port {}",
               options->core.max_streams, options->engine.model_dir,
               absl::FormatDuration(clock.Now() - load_start), runner.port(),
               (*metrics_server)->port());

  const int signo = common::rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("asr: signal {}, draining", signo);
  runner.Shutdown(clock.Now() + options->grpc.drain_timeout);
  (*metrics_server)->Stop();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) { return moe::common::rpc::ServiceMain("asr", argc, argv, Run); }
