// `router`: flags -> RouterOptions -> Validate -> load model + engine + scheduler -> gRPC server
// (health SERVING once the weights are loaded) + metrics server -> wait for SIGTERM -> drain.
//
//   router --set core.model_dir=/models/small --set grpc.port=0 --set metrics.port=0
//   router --config router.yaml --set core.scheduler.max_num_seqs=64
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/base/memory.h"
#include "common/config/loader.h"
#include "common/grpc/callback_queue_keeper.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/kernels/kernels.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "services/router/core/router_core.h"
#include "services/router/kv_store_client.h"
#include "services/router/remote_expert_executor.h"
#include "services/router/router_server.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"model", "core.model_dir"},
    {"port", "grpc.port"},
    {"metrics_port", "metrics.port"},
};

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "router";
  return buf;
}

absl::Status Run(int argc, char** argv) {
  common::RetainFreedMemory();  // before any thread allocates (common/base/memory.h)
  auto loaded = common::config::LoadServiceOptions<router::RouterOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  std::optional<router::RouterOptions>& options = *loaded;
  common::SetLogLevel(options->log_level);
  // The callback API (reactors, CallbackService) must not stall after a quiet second.
  common::rpc::KeepCallbackQueueAwake();
  // The kernels' SIMD path (bitwise identical on every path): MOE_KERNELS_ISA, default auto.
  if (absl::Status s = kernels::SelectIsaFromEnvironment(std::getenv("MOE_KERNELS_ISA")); !s.ok()) {
    return s;
  }

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  MOE_LOG_INFO("router: loading {}", options->core.model_dir);
  std::unique_ptr<router::RemoteExpertExecutor> experts;
  if (!options->experts.workers.empty()) {
    auto config = model::LoadModelConfig(options->core.model_dir);
    if (!config.ok()) return config.status();
    auto remote = router::RemoteExpertExecutor::Create(options->experts, *config, registry, clock);
    if (!remote.ok()) return remote.status();
    experts = std::move(*remote);
    MOE_LOG_INFO("router: experts on {} workers: {}", options->experts.workers.size(),
                 experts->placement()->DebugString());
  }
  std::unique_ptr<router::KvStoreClient> kv_store;
  if (!options->kv_store.targets.empty()) {
    auto config = model::LoadModelConfig(options->core.model_dir);
    if (!config.ok()) return config.status();
    // The engine's KV: [num_layers, 2, block_size, num_kv_heads, head_dim] f32 per block.
    auto client =
        router::KvStoreClient::Create(options->kv_store,
                                      {config->num_hidden_layers, 2, options->core.block_size,
                                       config->num_key_value_heads, config->head_dim},
                                      registry, clock);
    if (!client.ok()) return client.status();
    kv_store = std::move(*client);
    MOE_LOG_INFO("router: kv-store at {} (fetch deadline {}, response cache {})",
                 absl::StrJoin(options->kv_store.targets, ","),
                 absl::FormatDuration(options->kv_store.fetch_timeout),
                 options->kv_store.response_cache ? "on" : "off");
  }
  auto core =
      router::RouterCore::Create(options->core, registry, clock, experts.get(), kv_store.get());
  if (!core.ok()) return core.status();
  const model::ModelConfig& config = (*core)->config();

  router::RouterServerInfo info{
      .model_name = (*core)->model_name(),
      .router_id = options->router_id.empty() ? HostName() : options->router_id,
      .vocab_size = config.vocab_size,
      .max_context = config.max_position_embeddings,
      .num_layers = config.num_hidden_layers,
      .num_experts = config.num_experts,
      .kv_namespace = (*core)->kv_namespace()};
  auto auth = common::rpc::Authorizer::Create(options->grpc.auth, "router", registry, clock);
  if (!auth.ok()) return auth.status();
  router::RouterServer service((*core)->scheduler(), info, clock, **auth);
  service.set_remote_experts(experts.get());
  service.set_grammar_cache((*core)->grammar_cache());
  common::rpc::ServerRunner runner(options->grpc);
  runner.AddService(&service, moe::router::v1::Router::service_full_name());
  if (absl::Status s = runner.Start(); !s.ok()) return s;
  auto metrics_server = common::metrics::MetricsServer::Start(options->metrics, registry);
  if (!metrics_server.ok()) return metrics_server.status();
  if (absl::Status s = (*core)->scheduler().Start(); !s.ok()) return s;
  // Weights are mapped and the engine is built: ready.
  runner.SetServing(true);
  common::PrintListeningLine({.grpc = runner.port(), .metrics = (*metrics_server)->port()});
  MOE_LOG_INFO("router: serving {} on gRPC port {}, metrics port {}", info.model_name,
               runner.port(), (*metrics_server)->port());

  const int signo = common::rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("router: signal {}, draining", signo);
  // In-flight Generate calls finish (the scheduler keeps stepping) until the drain deadline.
  const absl::Time deadline = clock.Now() + options->grpc.drain_timeout;
  service.BeginDrain();
  runner.Shutdown(deadline);
  (*core)->scheduler().Shutdown(deadline);
  (*metrics_server)->Stop();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) { return moe::common::rpc::ServiceMain("router", argc, argv, Run); }
