// `operator`: flags -> OperatorOptions -> Validate -> the API client (kubeconfig or in-cluster)
// -> informers + controller -> leader election (reconciles only while leading) -> /metrics +
// listening line -> wait for SIGTERM (release the Lease, exit 0) or a lost Lease (exit 1: the
// Deployment restarts it as a candidate, like controller-runtime).
//
//   operator --set kubeconfig=$HOME/.kube/config --set chart=deploy/k8s
//            --set helm=deploy/test/.tools/helm3/helm --set prometheus=http://127.0.0.1:9090
#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/base/file.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/config/loader.h"
#include "common/grpc/signals.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "services/operator/chart_renderer.h"
#include "services/operator/controller.h"
#include "services/operator/grpc_transport_factory.h"
#include "services/operator/kube/http_kube_client.h"
#include "services/operator/kube/kube_config.h"
#include "services/operator/kube/leader_election.h"
#include "services/operator/metrics_source.h"
#include "services/operator/operator_options.h"
#include "services/operator/yaml_json.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"kubeconfig", "kubeconfig"},
    {"namespace", "namespace"},
    {"metrics_port", "metrics.port"},
};

// No Prometheus configured: every query says so, and pools keep their replicas.
class NoMetrics final : public op::MetricsSource {
 public:
  absl::StatusOr<std::vector<op::Sample>> Query(const std::string&) override {
    return absl::FailedPreconditionError("no prometheus configured");
  }
};

absl::Status Run(int argc, char** argv) {
  auto loaded = common::config::LoadServiceOptions<op::OperatorOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();
  const op::OperatorOptions& o = **loaded;
  common::SetLogLevel(o.log_level);

  auto env = [](const std::string& k) -> std::optional<std::string> {
    const char* v = std::getenv(k.c_str());
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  };
  auto config = o.kubeconfig.empty() ? op::kube::InClusterConfig(env)
                                     : op::kube::LoadKubeconfig(o.kubeconfig, o.context);
  if (!config.ok()) return config.status();
  const std::string ns = o.ns.empty() ? config->ns : o.ns;
  std::string identity = o.identity;
  if (identity.empty()) identity = env("POD_NAME").value_or("");
  if (identity.empty()) {
    char host[256] = {};
    ::gethostname(host, sizeof(host) - 1);
    identity = std::string(host) + "-" + std::to_string(::getpid());
  }
  nlohmann::json chart_values = nlohmann::json::object();
  if (!o.chart_values.empty()) {
    auto text = common::ReadFile(o.chart_values);
    if (!text.ok()) return text.status();
    auto docs = op::ParseYamlDocuments(*text);
    if (!docs.ok())
      return absl::InvalidArgumentError("chart_values: " + std::string(docs.status().message()));
    if (!docs->empty()) chart_values = (*docs)[0];
  }

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  op::kube::HttpKubeClient client(*config, {.user_agent = "moe-operator/" + identity}, registry);
  op::HelmRenderer renderer({.helm = o.helm, .chart = o.chart, .work_dir = o.work_dir});
  std::unique_ptr<op::MetricsSource> prometheus;
  if (o.prometheus.empty()) {
    prometheus = std::make_unique<NoMetrics>();
  } else {
    prometheus = std::make_unique<op::PrometheusClient>(o.prometheus);
  }
  op::GrpcTransportFactory transports(o.channel);
  op::ControllerOptions co;
  co.ns = ns;
  co.identity = identity;
  co.address_mode = o.address_mode == "pod_ip" ? op::AddressMode::kPodIp : op::AddressMode::kDns;
  co.resync = o.resync;
  co.pool_interval = o.pool_interval;
  co.stats_window = o.stats_window;
  co.workers = o.workers;
  co.rpc_timeout = o.rpc_timeout;
  co.chart_values = chart_values;
  if (!o.utilisation_query.empty()) co.utilisation_query = o.utilisation_query;
  co.autoscaler = {.tolerance = o.scale_tolerance,
                   .scale_up_stabilization = o.scale_up_stabilization,
                   .scale_down_stabilization = o.scale_down_stabilization,
                   .cooldown = o.scale_cooldown,
                   .max_scale_up_step = o.max_scale_up_step,
                   .max_scale_down_step = o.max_scale_down_step};
  if (auto s = co.autoscaler.Validate(); !s.ok()) return s;
  op::Controller controller(co, client, renderer, *prometheus, transports, clock, registry);

  auto metrics_server = common::metrics::MetricsServer::Start(o.metrics, registry);
  if (!metrics_server.ok()) return metrics_server.status();
  controller.Start();

  absl::Notification done;
  bool lost = false;
  std::unique_ptr<op::kube::LeaderElector> elector;
  if (o.leader_election) {
    elector = std::make_unique<op::kube::LeaderElector>(
        op::kube::LeaderElectionOptions{.ns = ns,
                                        .name = o.lease_name,
                                        .identity = identity,
                                        .lease_duration = o.lease_duration,
                                        .renew_deadline = o.renew_deadline,
                                        .retry_period = o.retry_period},
        client, clock, registry, [&] { controller.SetLeading(true); },
        [&] {
          controller.SetLeading(false);
          if (!done.HasBeenNotified()) {
            lost = true;
            done.Notify();
          }
        });
    elector->Start();
  } else {
    controller.SetLeading(true);
  }
  common::PrintListeningLine({.metrics = (*metrics_server)->port()});
  MOE_LOG_INFO("operator: {} watching namespace {} ({}:{}), metrics port {}", identity, ns,
               config->host, config->port, (*metrics_server)->port());

  int signo = 0;
  common::rpc::TerminationWatcher watcher([&](int s) {
    signo = s;
    if (!done.HasBeenNotified()) done.Notify();
  });
  done.WaitForNotification();
  if (lost) {
    controller.Stop();
    (*metrics_server)->Stop();
    return absl::AbortedError("lost the Lease: exiting so that a fresh candidate takes over");
  }
  MOE_LOG_INFO("operator: signal {}, stopping", signo);
  if (elector) elector->Stop();  // releases the Lease
  controller.SetLeading(false);
  controller.Stop();
  (*metrics_server)->Stop();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return moe::common::rpc::ServiceMain("operator", argc, argv, Run);
}
