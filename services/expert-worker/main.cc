// `expert-worker`: flags -> ExpertWorkerOptions -> Validate -> map the configured experts ->
// gRPC server (NOT_SERVING) + the shared-memory listener -> warm-up -> SERVING + listening line ->
// wait for SIGTERM -> drain.
//
//   expert-worker --set core.model_dir=/models/small --set core.experts=*:0-3 --set grpc.port=0
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/config/loader.h"
#include "common/grpc/callback_queue_keeper.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/kernels/kernels.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "common/shm/handshake.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/expert_worker_server.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"model", "core.model_dir"},
    {"experts", "core.experts"},
    {"port", "grpc.port"},
    {"metrics_port", "metrics.port"},
};

absl::Status Run(int argc, char** argv) {
  auto loaded =
      common::config::LoadServiceOptions<expert_worker::ExpertWorkerOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  std::optional<expert_worker::ExpertWorkerOptions>& options = *loaded;
  common::SetLogLevel(options->log_level);
  // The callback API (reactors, CallbackService) must not stall after a quiet second.
  common::rpc::KeepCallbackQueueAwake();
  // The kernels' SIMD path (bitwise identical on every path): MOE_KERNELS_ISA, default auto.
  if (absl::Status s = kernels::SelectIsaFromEnvironment(std::getenv("MOE_KERNELS_ISA")); !s.ok()) {
    return s;
  }

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  auto core = expert_worker::ExpertWorkerCore::Create(options->core, registry, clock);
  if (!core.ok()) return core.status();
  expert_worker::ExpertWorkerServer service(core->get());
  auto auth = common::rpc::Authorizer::Create(options->grpc.auth, "expert-worker", registry, clock);
  if (!auth.ok()) return auth.status();
  service.SetAuthorizer(**auth);
  // The shared-memory data plane for routers on this host (gRPC stays the fallback).
  expert_worker::CoreCallHandler shm_handler(**core);
  std::unique_ptr<expert_worker::ShmServer> shm;
  if (options->shm.enabled) {
    auto started = expert_worker::ShmServer::Start(options->shm, shm_handler, registry, clock);
    if (started.ok()) {
      shm = std::move(*started);
      service.EnableSharedMemory(*shm, shm::HostBootId());
    } else {
      MOE_LOG_WARN("expert-worker: shared memory off ({}); routers use gRPC",
                   started.status().ToString());
    }
  }
  common::rpc::ServerRunner runner(options->grpc);
  runner.AddService(&service, moe::expert_worker::v1::ExpertWorker::service_full_name());
  if (absl::Status s = runner.Start(); !s.ok()) return s;
  auto metrics_server = common::metrics::MetricsServer::Start(options->metrics, registry);
  if (!metrics_server.ok()) return metrics_server.status();
  // Ready only after every resident expert ran once (weights faulted in, scratch sized).
  if (absl::Status s = (*core)->WarmUp(); !s.ok()) return s;
  runner.SetServing(true);
  common::PrintListeningLine({.grpc = runner.port(), .metrics = (*metrics_server)->port()});
  MOE_LOG_INFO("expert-worker: {} experts resident, gRPC port {}, metrics port {}",
               (*core)->resident().experts.size(), runner.port(), (*metrics_server)->port());

  const int signo = common::rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("expert-worker: signal {}, draining", signo);
  runner.Shutdown(clock.Now() + options->grpc.drain_timeout);
  shm.reset();  // routers see their regions closed
  (*metrics_server)->Stop();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return moe::common::rpc::ServiceMain("expert-worker", argc, argv, Run);
}
