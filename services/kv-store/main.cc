// `kv-store`: flags -> KvStoreOptions -> Validate -> open L2/L3 (indexing L3's files) -> gRPC
// server + metrics server -> SERVING + listening line -> wait for SIGTERM -> drain, then finish
// the queued L3 writes.
//
//   kv-store --set core.l3_dir=/var/lib/moe/l3 --set grpc.port=0 --set metrics.port=0
#include <cstdio>
#include <memory>

#include "absl/status/status.h"
#include "common/base/clock.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/base/memory.h"
#include "common/config/loader.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "services/kv-store/core/kv_store_core.h"
#include "services/kv-store/kv_store_server.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"l3_dir", "core.l3_dir"},
    {"port", "grpc.port"},
    {"metrics_port", "metrics.port"},
};

absl::Status Run(int argc, char** argv) {
  common::RetainFreedMemory();  // before any thread allocates (common/base/memory.h)
  auto loaded = common::config::LoadServiceOptions<kv_store::KvStoreOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  std::optional<kv_store::KvStoreOptions>& options = *loaded;
  common::SetLogLevel(options->log_level);

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  auto core = kv_store::KvStoreCore::Create(options->core, registry, clock);
  if (!core.ok()) return core.status();
  kv_store::KvStoreServer service(**core);
  auto auth = common::rpc::Authorizer::Create(options->grpc.auth, "kv-store", registry, clock);
  if (!auth.ok()) return auth.status();
  service.SetAuthorizer(**auth);
  common::rpc::ServerRunner runner(options->grpc);
  runner.AddService(&service, moe::kv_store::v1::KvStore::service_full_name());
  if (absl::Status s = runner.Start(); !s.ok()) return s;
  auto metrics_server = common::metrics::MetricsServer::Start(options->metrics, registry);
  if (!metrics_server.ok()) return metrics_server.status();
  runner.SetServing(true);
  common::PrintListeningLine({.grpc = runner.port(), .metrics = (*metrics_server)->port()});
  MOE_LOG_INFO("kv-store: L2 {} bytes, L3 {} ({} bytes), gRPC port {}, metrics port {}",
               options->core.l2_bytes,
               options->core.l3_dir.empty() ? std::string("off") : options->core.l3_dir,
               options->core.l3_bytes, runner.port(), (*metrics_server)->port());

  const int signo = common::rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("kv-store: signal {}, draining", signo);
  runner.Shutdown(clock.Now() + options->grpc.drain_timeout);
  (*metrics_server)->Stop();
  core->reset();  // writes what is still queued for L3
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return moe::common::rpc::ServiceMain("kv-store", argc, argv, Run);
}
