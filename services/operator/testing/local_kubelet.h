// A test stand-in for the kubelet and the StatefulSet/Deployment controllers: it runs the pods
// of the StatefulSets and Deployments in one namespace of an API server (the in-test one) as
// local processes (common/process), and reports their status back, so that the operator's
// objects come alive on one machine without Kubernetes.
//
// What it emulates, and how:
//   - replicas: pods "<statefulset>-<ordinal>" (Deployments: "<deployment>-<n>"), started in
//     parallel; on scale-down the highest ordinals go (not ready first, SIGTERM, then the Pod
//     object is deleted); a process that exits is restarted;
//   - the pod network: each pod gets its own loopback address (127.0.x.y), so every pod binds
//     the chart's fixed ports; "0.0.0.0" in a mounted config is that address;
//   - cluster DNS: "<pod>.<service>.<namespace>.svc" in a mounted config is the pod's address;
//   - volumes: configMap (its data written to files), hostPath, emptyDir; mount paths in
//     arguments and in mounted configs are mapped to those local directories;
//   - the image: the first argument names the binary in bin_dir (the image's entrypoint);
//   - init containers run to completion first; $(POD_NAME) / $(POD_NAMESPACE) are expanded;
//   - readiness: the container's readinessProbe (gRPC health, or HTTP GET), every probe
//     interval; Pod status (podIP, Ready) and StatefulSet/Deployment status (replicas,
//     readyReplicas, updatedReplicas, observedGeneration) are written through the API;
//   - service discovery for Prometheus: a file_sd JSON file with one target per container
//     port of every running pod, labelled with the __meta_kubernetes_* labels kubernetes_sd
//     would give, so that deploy/monitoring/prometheus.yaml's relabelling applies unchanged.
// Not emulated: rolling updates of a changed pod template (pods keep their first template),
// resource limits, security contexts, probes other than readiness.
//
// Thread-safety: Start/Stop from one thread; Pods() from any.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "services/operator/kube/kube_client.h"

namespace moe::op::testing {

struct LocalKubeletOptions {
  std::string ns;
  std::string bin_dir;   // the services' binaries (build/bin)
  std::string work_dir;  // per-pod directories and logs
  std::string file_sd;   // the Prometheus file_sd JSON written ("" = none)
  absl::Duration poll = absl::Milliseconds(100);
  absl::Duration stop_grace = absl::Seconds(15);
  std::vector<std::string> env;  // extra environment of every container ("K=V")
};

class LocalKubelet {
 public:
  struct PodInfo {
    std::string name;
    std::string ip;
    bool ready = false;
    int restarts = 0;
  };

  // `client` is borrowed and must outlive the kubelet.
  LocalKubelet(LocalKubeletOptions options, kube::KubeClient& client);
  ~LocalKubelet();  // Stop()
  LocalKubelet(const LocalKubelet&) = delete;
  LocalKubelet& operator=(const LocalKubelet&) = delete;

  void Start();
  // Stops every pod (SIGTERM, then SIGKILL after stop_grace) and joins.
  void Stop();
  std::vector<PodInfo> Pods() const;
  // The loopback address of pod `name` (allocated on first use: the "DNS").
  std::string IpOf(const std::string& pod);
  // A container's log (its stderr), for failure messages.
  std::string Log(const std::string& pod, const std::string& container) const;

 private:
  struct Pod;
  void Run();
  void Sync();
  void StartPod(const std::string& name, const nlohmann::json& owner, const nlohmann::json& tmpl);
  void StopPod(const std::string& name);
  void Probe(Pod& pod);
  std::string Rewrite(const std::string& text, const Pod& pod);
  void WriteStatus(const nlohmann::json& owner, const char* plural, int replicas, int ready);
  void WriteFileSd();

  const LocalKubeletOptions options_;
  kube::KubeClient& client_;
  std::thread thread_;
  std::atomic<bool> stop_{false};

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Pod>> pods_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> ips_ ABSL_GUARDED_BY(mu_);
  int next_ip_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, nlohmann::json> last_status_;  // the sync thread's
};

}  // namespace moe::op::testing
