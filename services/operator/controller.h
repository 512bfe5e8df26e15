// The controller: informers on the operator's resources, a work queue of MoEClusters, and per
// cluster one reconcile at a time (core/reconcile.h decides; this carries it out):
//   1. the MoECluster (a finalizer added; on deletion the owned objects are deleted, then the
//      finalizer is removed), its ExpertPools (entries and standalone ones);
//   2. the routers' placement (GetStats on every ready router over gRPC);
//   3. the expert-pool autoscaler (core/autoscaler.h) on Prometheus' utilisation, every
//      pool_interval, for pools that are steady;
//   4. the chart rendered for the cluster (ChartRenderer), the desired objects applied with
//      server-side apply, orphans deleted;
//   5. a placement change when the pool plan asks for one (scale up / down: load, switch every
//      router, drain, unload: router::ApplyRecalibration);
//   6. recalibrations: RouterCalibration objects that are due, the cluster's Threshold mode
//      (RecalibrationCoordinator) or Scheduled mode;
//   7. the statuses (status subresource, server-side apply), events.
// Only while leading (SetLeading) does it reconcile or write; informers run either way, so that
// a new leader starts with warm caches.
//
// Metrics: moe_operator_reconciles_total{result}, moe_operator_reconcile_seconds,
// moe_operator_applies_total{kind}, moe_operator_deletes_total{kind},
// moe_operator_scale_decisions_total{direction}, moe_operator_placement_changes_total{result},
// moe_operator_recalibrations_total{trigger, result}, moe_operator_pool_replicas{cluster, pool,
// state} (state: desired, counted), plus the informers', the API client's and the elector's.
//
// Thread-safety: Start/Stop/SetLeading from any thread; reconciles run on `workers` threads,
// one per cluster at a time.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "services/operator/chart_renderer.h"
#include "services/operator/core/autoscaler.h"
#include "services/operator/core/topology.h"
#include "services/operator/kube/informer.h"
#include "services/operator/kube/kube_client.h"
#include "services/operator/metrics_source.h"
#include "services/operator/work_queue.h"
#include "services/router/core/recalibration.h"

namespace moe::op {

// Makes the recalibration transport of a set of routers (gRPC in the binary).
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  virtual absl::StatusOr<std::unique_ptr<router::RecalibrationTransport>> Make(
      const std::vector<std::string>& routers, absl::Duration rpc_timeout) = 0;
};

struct ControllerOptions {
  std::string ns;  // the namespace watched; "" = every namespace
  std::string field_manager = "moe-operator";
  std::string identity = "moe-operator";  // events' reporting instance
  AddressMode address_mode = AddressMode::kDns;
  absl::Duration resync = absl::Seconds(30);        // every cluster at least this often
  absl::Duration pool_interval = absl::Seconds(5);  // placement and autoscaling checks
  absl::Duration stats_window = absl::Seconds(60);  // GetStats window of those checks
  int workers = 2;
  AutoscalerOptions autoscaler;
  // PromQL giving one sample per worker id (label `worker`): $namespace and $routers (the
  // router StatefulSet's name) are substituted. The chart's adapter rule, per cluster.
  std::string utilisation_query =
      "max by (worker) (moe_expert_replica_utilisation{job=\"router\",namespace=\"$namespace\","
      "pod=~\"$routers-[0-9]+\"})";
  absl::Duration rpc_timeout = absl::Seconds(60);  // GetStats, SetPlacement (covers the drain)
  nlohmann::json chart_values = nlohmann::json::object();  // under every cluster's values
};

class Controller {
 public:
  // Every collaborator is borrowed and must outlive the controller.
  Controller(ControllerOptions options, kube::KubeClient& client, ChartRenderer& renderer,
             MetricsSource& metrics, TransportFactory& transports, common::Clock& clock,
             common::metrics::Registry& registry);
  ~Controller();  // Stop()
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the informers and the workers. Reconciles begin once SetLeading(true).
  void Start();
  // Ends watches and joins every thread.
  void Stop();
  void SetLeading(bool leading);
  bool leading() const { return leading_.load(); }
  // Whether every informer has listed once.
  bool Synced() const;

 private:
  struct Metrics;
  struct ClusterState;
  struct Observed;

  void Worker();
  // One reconcile of cluster `key` ("ns/name"); returns when to look again.
  absl::Duration Reconcile(const std::string& key);
  absl::Duration ReconcileLive(const nlohmann::json& object, ClusterState& state);
  void Finalize(const nlohmann::json& object, ClusterState& state);
  void Enqueue(const nlohmann::json& object, const std::string& resource);
  void Event(const nlohmann::json& involved, const std::string& type, const std::string& reason,
             const std::string& message);
  absl::Status WriteStatus(const kube::Resource& r, const nlohmann::json& object,
                           const nlohmann::json& status);
  kube::Informer& informer(const std::string& plural) const;

  const ControllerOptions options_;
  kube::KubeClient& client_;
  ChartRenderer& renderer_;
  MetricsSource& metrics_source_;
  TransportFactory& transports_;
  common::Clock& clock_;
  common::metrics::Registry& registry_;
  std::unique_ptr<Metrics> metrics_;

  std::map<std::string, std::unique_ptr<kube::Informer>> informers_;  // by plural
  WorkQueue queue_;
  std::vector<std::thread> workers_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> stopped_{false};

  absl::Mutex mu_;
  // By cluster key. A state is used by the one worker reconciling its cluster.
  std::map<std::string, std::unique_ptr<ClusterState>> states_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::op
