// The operator's options (`operator --help` lists the keys; a YAML file with --config, and
// `--set key=value` overrides), and their translation into the controller's.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grpc/options.h"
#include "common/metrics/metrics_server.h"

namespace moe::op {

struct OperatorOptions {
  // Where the API server is: a kubeconfig file, or "" for the pod's service account.
  std::string kubeconfig;
  std::string context;  // of the kubeconfig; "" = its current-context
  // The namespace watched and the Lease's; "" = the kubeconfig's / the pod's namespace.
  std::string ns;
  // This replica's name in the Lease and in events; "" = $POD_NAME, else the host name.
  std::string identity;
  bool leader_election = true;
  std::string lease_name = "moe-operator";
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  // The renderer: `helm template` of the chart.
  std::string helm = "/usr/local/bin/helm";
  std::string chart = "/usr/share/moe/chart";
  // A YAML file of chart values under every cluster's (ports, network policy, monitoring...).
  std::string chart_values;
  std::string work_dir = "/tmp";
  // The Prometheus HTTP API the autoscaler queries ("" = expert pools are not autoscaled).
  std::string prometheus;
  std::string utilisation_query;  // "" = the built-in (controller.h)
  // dns: pods by their StatefulSet DNS names (the chart's); pod_ip: by status.podIP.
  std::string address_mode = "dns";
  absl::Duration resync = absl::Seconds(30);
  absl::Duration pool_interval = absl::Seconds(5);
  absl::Duration stats_window = absl::Seconds(60);
  absl::Duration rpc_timeout = absl::Seconds(60);
  // Channels to routers and workers, which the operator calls as role admin (SECURITY.md):
  // channel.tls (CA, client certificate and key) under mTLS, or channel.token_file.
  common::rpc::ChannelOptions channel;
  int workers = 2;
  // The expert-pool autoscaler's damping (core/autoscaler.h).
  double scale_tolerance = 0.1;
  absl::Duration scale_up_stabilization = absl::Seconds(30);
  absl::Duration scale_down_stabilization = absl::Minutes(5);
  absl::Duration scale_cooldown = absl::Minutes(2);
  int max_scale_up_step = 2;
  int max_scale_down_step = 1;
  common::metrics::MetricsServerOptions metrics;
  std::string log_level = "info";

  static void Describe(common::config::Schema<OperatorOptions>& s) {
    using O = OperatorOptions;
    s.Add("kubeconfig", &O::kubeconfig, "kubeconfig file; empty = in-cluster service account");
    s.Add("context", &O::context, "kubeconfig context; empty = current-context");
    s.Add("namespace", &O::ns, "namespace watched; empty = the config's");
    s.Add("identity", &O::identity, "this replica in the Lease; empty = $POD_NAME or hostname");
    s.Add("leader_election", &O::leader_election, "take a Lease before acting");
    s.Add("lease_name", &O::lease_name, "the Lease's name").NonEmpty();
    s.Add("lease_duration", &O::lease_duration, "a Lease not renewed this long may be taken")
        .Range(absl::Seconds(1), absl::Minutes(10));
    s.Add("renew_deadline", &O::renew_deadline, "a leader stops acting after failing this long")
        .Range(absl::Milliseconds(500), absl::Minutes(10));
    s.Add("retry_period", &O::retry_period, "time between Lease attempts")
        .Range(absl::Milliseconds(100), absl::Minutes(1));
    s.Add("helm", &O::helm, "helm binary (absolute path)").NonEmpty();
    s.Add("chart", &O::chart, "the chart's directory (deploy/k8s)").NonEmpty();
    s.Add("chart_values", &O::chart_values, "YAML values under every cluster's");
    s.Add("work_dir", &O::work_dir, "writable directory for helm").NonEmpty();
    s.Add("prometheus", &O::prometheus, "Prometheus URL; empty = no expert-pool autoscaling");
    s.Add("utilisation_query", &O::utilisation_query, "PromQL per worker; $namespace $routers");
    s.Add("address_mode", &O::address_mode, "dns | pod_ip");
    s.Add("resync", &O::resync, "every cluster reconciled at least this often")
        .Range(absl::Seconds(1), absl::Hours(1));
    s.Add("pool_interval", &O::pool_interval, "autoscaling and placement checks")
        .Range(absl::Milliseconds(100), absl::Minutes(10));
    s.Add("stats_window", &O::stats_window, "GetStats window of the checks")
        .Range(absl::Seconds(1), absl::Hours(1));
    s.Add("rpc_timeout", &O::rpc_timeout, "deadline of router/worker RPCs (covers a drain)")
        .Range(absl::Seconds(1), absl::Minutes(30));
    s.Section("channel", &O::channel);
    s.Add("workers", &O::workers, "clusters reconciled at once").Range(1, 64);
    s.Add("scale_tolerance", &O::scale_tolerance, "no change within this of the target")
        .Range(0.0, 0.9);
    s.Add("scale_up_stabilization", &O::scale_up_stabilization, "load high this long to add")
        .Range(absl::ZeroDuration(), absl::Hours(1));
    s.Add("scale_down_stabilization", &O::scale_down_stabilization, "low this long to remove")
        .Range(absl::ZeroDuration(), absl::Hours(1));
    s.Add("scale_cooldown", &O::scale_cooldown, "no change this long after one")
        .Range(absl::ZeroDuration(), absl::Hours(1));
    s.Add("max_scale_up_step", &O::max_scale_up_step, "workers added at once").Range(1, 64);
    s.Add("max_scale_down_step", &O::max_scale_down_step, "workers removed at once").Range(1, 64);
    s.Section("metrics", &O::metrics);
    s.Add("log_level", &O::log_level, "trace|debug|info|warn|error|off");
  }
  absl::Status Validate() const {
    if (address_mode != "dns" && address_mode != "pod_ip") {
      return absl::InvalidArgumentError("address_mode: \"" + address_mode +
                                        "\" is not one of dns, pod_ip");
    }
    if (leader_election && !(retry_period < renew_deadline && renew_deadline < lease_duration)) {
      return absl::InvalidArgumentError(
          "renew_deadline: want retry_period < renew_deadline < lease_duration");
    }
    return common::config::CheckFields(*this);
  }
};

}  // namespace moe::op
