// Leader election with a coordination.k8s.io/v1 Lease (client-go's leaderelection, reduced), so
// that of several operator replicas exactly one acts:
//   - a candidate takes the Lease when it does not exist, when it names no holder, or when the
//     holder has not renewed it for leaseDurationSeconds (by the candidate's clock since it
//     last saw the renewTime change: clocks of different pods are never compared);
//   - the leader renews every `retry_period`; the API server's resourceVersion precondition
//     (409 Conflict) makes two concurrent takes impossible: one wins, the other sees it;
//   - a leader that cannot renew for `renew_deadline` (< lease_duration) stops leading before
//     anyone else can take over; on Stop() it releases the Lease (empty holder) for a fast
//     handover.
// `on_started` runs when this candidate becomes leader, `on_stopped` when it stops being one
// (both on the elector's thread). leading() may be polled before every write.
//
// Metrics: moe_operator_leader (1 while leading), moe_operator_leader_transitions_total.
//
// Thread-safety: Start/Stop from one thread; leading() from any.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "services/operator/kube/kube_client.h"

namespace moe::op::kube {

struct LeaderElectionOptions {
  std::string ns;
  std::string name = "moe-operator";
  std::string identity;  // this candidate (the pod's name)
  absl::Duration lease_duration = absl::Seconds(15);
  absl::Duration renew_deadline = absl::Seconds(10);
  absl::Duration retry_period = absl::Seconds(2);
  absl::Status Validate() const;
};

class LeaderElector {
 public:
  // `client`, `clock` and `registry` are borrowed and must outlive the elector.
  LeaderElector(LeaderElectionOptions options, KubeClient& client, common::Clock& clock,
                common::metrics::Registry& registry, std::function<void()> on_started,
                std::function<void()> on_stopped);
  ~LeaderElector();  // Stop()
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  // Stops campaigning; a leader releases the Lease. Joins the thread.
  void Stop();
  bool leading() const { return leading_.load(); }

  // One attempt to take or renew the Lease now (what the thread does every retry_period).
  // Returns whether this candidate holds it afterwards. For tests with a FakeClock.
  bool TryAcquireOrRenew();

 private:
  struct Metrics;
  void Run();
  void SetLeading(bool leading);

  const LeaderElectionOptions options_;
  KubeClient& client_;
  common::Clock& clock_;
  std::unique_ptr<Metrics> metrics_;
  const std::function<void()> on_started_, on_stopped_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> leading_{false};

  // The elector's thread only.
  std::string observed_record_;  // holder + renewTime last seen
  absl::Time observed_at_ = absl::InfinitePast();
  absl::Time last_renew_ = absl::InfinitePast();
  bool held_by_other_ = false;  // the last read Lease named another holder
};

const Resource& LeaseResource();

}  // namespace moe::op::kube
