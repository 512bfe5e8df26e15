// An ExpertExecutor whose experts run on expert workers over gRPC (DESIGN.md §2): per layer call,
// the batches are grouped by the replica chosen for each expert (core/dispatch_planner.h: least
// loaded, skipping replicas above the utilisation threshold), and each worker gets one
// RunExperts call, all in flight at once (gRPC callback API); the engine combines.
//
// Failures: every call has a deadline. A failed call's batches are retried on other replicas of
// the same experts (up to max_attempts rounds); a worker that failed with UNAVAILABLE /
// DEADLINE_EXCEEDED / a transport error is marked unhealthy and probed back (grpc.health.v1)
// every probe_interval. An expert with no live replica left is reported by AwaitPartial (its
// rows zero-filled) so that only the sequences that needed it fail; Await turns it into
// UNAVAILABLE.
//
// Placement: a versioned PlacementTable, switched by SetPlacement (recalibration step 2). A call
// keeps the table it was submitted under until it is awaited, so the old version's calls finish
// on it; SetPlacement returns once they have drained.
//
// Load: tokens per (layer, expert) and per (layer, worker) go to the LoadTracker (GetStats,
// moe_expert_balancedness); moe_expert_call_seconds{worker}, moe_expert_replica_utilisation
// {worker}, moe_placement_version, moe_recalibrations_total.
//
// Thread-safety: Submit/Await/AwaitPartial/RunsConcurrently as ExpertExecutor says (one caller
// at a time: the engine's step thread); the RPCs of a call complete on gRPC's threads, and its
// outputs are written by AwaitPartial itself. SetPlacement, placement(), load_tracker() and
// healthy() are thread-safe and may run concurrently with the calls (a gRPC SetPlacement
// handler, the admin stats); SetPlacement blocks until the old version's calls are awaited.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/engine/expert_executor.h"
#include "common/grpc/channel_factory.h"
#include "common/metrics/registry.h"
#include "common/model/model_config.h"
#include "services/router/core/load_tracker.h"
#include "services/router/core/placement_table.h"

namespace moe::router {

struct RemoteExpertsOptions {
  // Expert worker addresses ("host:port"); worker i has id i. Empty = experts in-process.
  std::vector<std::string> workers;
  // Initial placement: "L:E=w1,w2", "L:E1-E2=w", "*:E=w"; empty = round robin with `replicas`.
  std::vector<std::string> placement;
  int replicas = 1;
  // Deadline of one RunExperts call.
  absl::Duration call_timeout = absl::Seconds(2);
  // Replicas busier than this (busy fraction over the last second) are avoided when another
  // replica is below it.
  double utilisation_threshold = 0.85;
  // How often unhealthy workers are probed (and gauges refreshed).
  absl::Duration probe_interval = absl::Milliseconds(200);
  // Rounds per call: the first try plus retries on other replicas.
  int max_attempts = 3;
  // How long SetPlacement waits for the old version's calls to drain.
  absl::Duration drain_timeout = absl::Seconds(30);
  common::rpc::ChannelOptions channel;

  static void Describe(common::config::Schema<RemoteExpertsOptions>& s) {
    s.Add("workers", &RemoteExpertsOptions::workers, "expert worker addresses; empty = in-process");
    s.Add("placement", &RemoteExpertsOptions::placement, "L:E=w1,w2 entries; empty = round robin");
    s.Add("replicas", &RemoteExpertsOptions::replicas, "round-robin replicas").Range(1, 1024);
    s.Add("call_timeout", &RemoteExpertsOptions::call_timeout, "deadline of one RunExperts")
        .Range(absl::Milliseconds(1), absl::Minutes(10));
    s.Add("utilisation_threshold", &RemoteExpertsOptions::utilisation_threshold,
          "avoid replicas busier than this")
        .Range(0.0, 1.0);
    s.Add("probe_interval", &RemoteExpertsOptions::probe_interval, "health probe period")
        .Range(absl::Milliseconds(10), absl::Minutes(1));
    s.Add("max_attempts", &RemoteExpertsOptions::max_attempts, "rounds per call").Range(1, 16);
    s.Add("drain_timeout", &RemoteExpertsOptions::drain_timeout, "SetPlacement drain wait")
        .Range(absl::ZeroDuration(), absl::Minutes(10));
    s.Section("channel", &RemoteExpertsOptions::channel);
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

class RemoteExpertExecutor final : public engine::ExpertExecutor {
 public:
  // Builds the initial placement (version 0) from `options` for `config` and starts the
  // prober. `registry` and `clock` are borrowed and must outlive the executor. Errors:
  // InvalidArgument (options, placement), the channel factory's.
  static absl::StatusOr<std::unique_ptr<RemoteExpertExecutor>> Create(
      const RemoteExpertsOptions& options, const model::ModelConfig& config,
      common::metrics::Registry& registry, common::Clock& clock);
  // Stops the prober. REQUIRES: no call outstanding.
  ~RemoteExpertExecutor() override;

  // ExpertExecutor
  absl::StatusOr<engine::ExpertCallHandle> Submit(const engine::ExpertCall& call) override;
  absl::Status Await(engine::ExpertCallHandle handle) override;
  absl::Status AwaitPartial(engine::ExpertCallHandle handle,
                            std::vector<int32_t>* unavailable_experts) override;
  bool RunsConcurrently() const override { return true; }

  // Switches new calls to `table` and waits (up to drain_timeout) until no call submitted under
  // an older version is outstanding. Returns the previous version. Errors: InvalidArgument
  // (table does not fit the model), FailedPrecondition (version not newer than the active one),
  // DeadlineExceeded (switched, but the old version did not drain in time).
  absl::StatusOr<uint64_t> SetPlacement(PlacementTable table);
  std::shared_ptr<const PlacementTable> placement() const;
  LoadTracker& load_tracker() { return *load_tracker_; }
  // Whether worker `worker_id` is currently considered live.
  bool healthy(int32_t worker_id) const;

 private:
  struct Worker;
  struct Rpc;
  struct Pending;
  struct Metrics;

  RemoteExpertExecutor(const RemoteExpertsOptions& options, const model::ModelConfig& config,
                       common::metrics::Registry& registry, common::Clock& clock);
  absl::Status ConnectLocked(const PlacementTable& table) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans `batch_idx` of `p` and sends one RPC per worker; batches without a live replica go
  // to p->unavailable.
  void Dispatch(Pending* p, const std::vector<size_t>& batch_idx);
  void MarkUnhealthy(int32_t worker_id);
  void ProbeLoop();

  const RemoteExpertsOptions options_;
  const model::ModelConfig config_;
  common::Clock& clock_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<LoadTracker> load_tracker_;

  // Owned by the step thread.
  engine::ExpertCallHandle next_handle_ = 1;
  uint64_t rotation_ = 0;
  std::map<engine::ExpertCallHandle, std::unique_ptr<Pending>> pending_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const PlacementTable> table_ ABSL_GUARDED_BY(mu_);
  std::map<int32_t, std::shared_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // placement version -> calls submitted under it and not yet awaited.
  std::map<uint64_t, int64_t> outstanding_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread prober_;
};

}  // namespace moe::router
