// An ExpertExecutor whose experts run on expert workers (DESIGN.md §2): per layer call, the
// batches are grouped by the replica chosen for each expert (core/dispatch_planner.h: least
// loaded, skipping replicas above the utilisation threshold), and each worker gets one call,
// all in flight at once; the engine combines.
//
// Transports, per worker at run time (`transport`): a worker on this host that offers shared
// memory in NegotiateTransport gets its calls through a region (shm_expert_channel.h: rings,
// no protobuf, futex wake-ups); any call that does not fit the region's rings right now, and
// every worker elsewhere, goes over gRPC (RunExperts, callback API). Both give the same bits
// and the same failure handling below.
//
// Failures: every call has a deadline that follows its work (ExpertCallTimeout: call_timeout
// plus its rows x the expert's FLOPs at min_expert_gflops, at most call_timeout_max), so a
// large prefill chunk on a slow but healthy worker is not mistaken for a dead one. A failed
// call's batches are retried on other replicas of the same experts (up to max_attempts
// rounds); a worker that failed with UNAVAILABLE / DEADLINE_EXCEEDED / a transport error (a
// region whose worker closed it or stopped beating) is marked unhealthy and probed back
// (grpc.health.v1) every probe_interval, its shared memory renegotiated. An expert with no live
// replica left is reported by AwaitPartial (its rows zero-filled) so that only the sequences
// that needed it fail; Await turns it into UNAVAILABLE.
//
// Placement: a versioned PlacementTable, switched by SetPlacement (recalibration step 2). A call
// keeps the table it was submitted under until it is awaited, so the old version's calls finish
// on it; SetPlacement returns once they have drained.
//
// Load: tokens per (layer, expert) and per (layer, worker) go to the LoadTracker (GetStats,
// moe_expert_balancedness), work proportional to the call; moe_expert_call_seconds{worker},
// moe_expert_calls_total{worker,transport}, moe_expert_shm_fallbacks_total{worker},
// moe_expert_transport_shm{worker}, moe_expert_replica_utilisation{worker},
// moe_expert_layer_dispatch_seconds, moe_expert_layer_overhead_seconds,
// moe_placement_version, moe_recalibrations_total.
//
// Thread-safety: Submit/Await/AwaitPartial/RunsConcurrently as ExpertExecutor says (one caller
// at a time: the engine's step thread, which also drives the shared-memory rings); gRPC calls
// complete on gRPC's threads, and a call's outputs are written by AwaitPartial itself.
// SetPlacement, placement(), load_tracker(), healthy() and transport() are thread-safe and may
// run concurrently with the calls (a gRPC SetPlacement handler, the admin stats); SetPlacement
// blocks until the old version's calls are awaited.
#pragma once

#include <cstdint>
#include <functional>
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
#include "services/router/shm_expert_channel.h"

namespace moe::shm {
class Heartbeat;
}  // namespace moe::shm

namespace moe::router {

// The data plane to a worker.
enum class ExpertTransport {
  kAuto,  // shared memory where the worker offers it (same host), else gRPC
  kGrpc,  // gRPC only
  kShm,   // shared memory required: a worker that does not offer it counts as down
};

struct RemoteExpertsOptions {
  // Expert worker addresses ("host:port"); worker i has id i. Empty = experts in-process.
  std::vector<std::string> workers;
  // Initial placement: "L:E=w1,w2", "L:E1-E2=w", "*:E=w"; empty = round robin with `replicas`.
  std::vector<std::string> placement;
  int replicas = 1;
  // Data plane per worker (see ExpertTransport); `shm` its shared-memory settings.
  ExpertTransport transport = ExpertTransport::kAuto;
  ShmChannelOptions shm;
  // Deadline of one call to one worker: call_timeout (the deadline of a small call, also the
  // floor) + its rows x the expert FFN's FLOPs / min_expert_gflops, at most call_timeout_max.
  // min_expert_gflops is the slowest a healthy worker computes (GFLOP/s per call); a Mixtral
  // expert is 0.35 GFLOP per row, so 1024 rows at 1 GFLOP/s get 2 s + 361 s.
  absl::Duration call_timeout = absl::Seconds(2);
  absl::Duration call_timeout_max = absl::Minutes(10);
  double min_expert_gflops = 1.0;
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
    s.AddEnum("transport", &RemoteExpertsOptions::transport,
              {{"auto", ExpertTransport::kAuto},
               {"grpc", ExpertTransport::kGrpc},
               {"shm", ExpertTransport::kShm}},
              "data plane: shared memory where offered (auto), gRPC only, shared memory only");
    s.Section("shm", &RemoteExpertsOptions::shm);
    s.Add("call_timeout", &RemoteExpertsOptions::call_timeout,
          "deadline of a small call (the floor)")
        .Range(absl::Milliseconds(1), absl::Minutes(10));
    s.Add("call_timeout_max", &RemoteExpertsOptions::call_timeout_max,
          "cap of the work-based deadline")
        .Range(absl::Milliseconds(1), absl::Hours(2));
    s.Add("min_expert_gflops", &RemoteExpertsOptions::min_expert_gflops,
          "slowest healthy expert throughput, GFLOP/s per call (sizes deadlines)")
        .Range(1e-3, 1e6);
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

// The deadline of one call of `rows` token rows to one worker (see RemoteExpertsOptions).
absl::Duration ExpertCallTimeout(const RemoteExpertsOptions& options,
                                 const model::ModelConfig& config, int64_t rows);

// One layer call's timing, for benchmarks: from Submit until its outputs were written, and the
// longest worker compute among its final round's calls.
struct ExpertCallTiming {
  absl::Duration dispatch;
  absl::Duration max_compute;
  int shm_calls = 0;   // worker calls of the final round over shared memory
  int grpc_calls = 0;  // ... and over gRPC
  // Over the final round's successful shared-memory calls (zero without any), from the calls'
  // CLOCK_MONOTONIC timestamps (ShmCallTimes): how long at least one worker was computing (the
  // union of their compute intervals: max_compute when the workers ran side by side, their sum
  // when they took turns on a core), and the longest hand-off each way (the router began
  // writing -> the worker read it; the worker published -> the router read it).
  absl::Duration shm_compute_union;
  absl::Duration shm_to_worker_max;
  absl::Duration shm_to_router_max;
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
  // "shm" when worker `worker_id`'s calls go through a live shared-memory region, else "grpc".
  std::string transport(int32_t worker_id) const;
  // Called at the end of every AwaitPartial on the step thread (benchmarks). Set before use.
  void set_call_observer(std::function<void(const ExpertCallTiming&)> observer) {
    call_observer_ = std::move(observer);
  }

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
  // NegotiateTransport with `w` and, when it offers shared memory, the region's handshake.
  // Null when the worker answers gRPC or (kAuto) its offered socket cannot be reached; an error
  // when the RPC failed (asked again at the next probe) or, in kShm mode, the handshake did.
  absl::StatusOr<std::shared_ptr<ShmExpertChannel>> Negotiate(Worker& w);
  // Negotiates with every worker in `workers` and installs the results (no lock held while
  // negotiating). In kShm mode a worker that does not offer shared memory is marked down.
  void NegotiateAll(const std::vector<std::shared_ptr<Worker>>& workers);

  const RemoteExpertsOptions options_;
  const model::ModelConfig config_;
  common::Clock& clock_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<LoadTracker> load_tracker_;
  const std::string boot_id_;  // this host's, sent in NegotiateTransport
  // Beats this router's side of every region; outlives the channels (declared before them).
  std::unique_ptr<shm::Heartbeat> heartbeat_;

  // Owned by the step thread.
  engine::ExpertCallHandle next_handle_ = 1;
  uint64_t rotation_ = 0;
  uint64_t next_shm_call_ = 1;
  std::map<engine::ExpertCallHandle, std::unique_ptr<Pending>> pending_;
  std::vector<ExpertTokens> layer_tokens_;  // Submit's scratch
  std::function<void(const ExpertCallTiming&)> call_observer_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const PlacementTable> table_ ABSL_GUARDED_BY(mu_);
  std::map<int32_t, std::shared_ptr<Worker>> workers_ ABSL_GUARDED_BY(mu_);
  // placement version -> calls submitted under it and not yet awaited.
  std::map<uint64_t, int64_t> outstanding_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread prober_;
};

}  // namespace moe::router
