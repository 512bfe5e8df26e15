// Recalibration, coordinated in one place (DESIGN.md §2): gather every router's load window,
// compute a new placement (placement_algorithm.h), then
//   1. load the new replicas on the workers,
//   2. switch every router to the new version (SetPlacement; a router answers once calls it
//      dispatched under older versions have drained),
//   3. unload what is no longer placed.
// At every moment each expert has a live replica in the version a router uses: the new replicas
// are resident before any router uses them, and nothing is unloaded before every router left
// the old version. The transport is an interface so the protocol is unit-tested without gRPC;
// services/router/grpc_recalibration_transport.h is the gRPC one (moe admin, the operator).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "services/router/core/placement_table.h"

namespace moe::router {

// Worker id -> tokens it processed per decoder layer [num_layers] (a token counts once per
// chosen expert the worker ran). Workers absent from the map processed nothing.
using WorkerTokens = std::map<int32_t, std::vector<uint64_t>>;

// What one router reports (GetStats).
struct RouterLoadReport {
  std::string router_id;
  PlacementTable placement;             // its active placement
  std::vector<uint64_t> expert_tokens;  // [num_layers * num_experts] over the window
  // Measured: tokens each worker processed for this router over the same window. Empty when
  // the router does not report them (then only the expected balancedness is known).
  WorkerTokens worker_tokens;
};

// The load of the whole cluster over one window: every router's report summed.
struct ClusterLoad {
  PlacementTable placement;             // the placement every router uses
  std::vector<uint64_t> expert_tokens;  // [num_layers * num_experts], summed over routers
  WorkerTokens worker_tokens;           // summed over routers, per worker id
  uint64_t window_tokens = 0;           // sum of expert_tokens (all layers)
  std::string first_router_id;          // reports[0].router_id, for messages
};

// Sums `reports`. FAILED_PRECONDITION when there are none, when routers disagree on the
// placement (version, workers or replicas: a recalibration was interrupted;
// CompleteInterruptedSwitch converges them) or report windows of different shapes.
absl::StatusOr<ClusterLoad> AggregateLoad(absl::Span<const RouterLoadReport> reports);

// Measured balancedness of each decoder layer of `table`: mean over the table's workers of the
// tokens they processed / the max (workers absent from `worker_tokens` count as 0). Dense layers
// (no replicas) and layers where nothing ran: 1.
std::vector<double> MeasuredBalancedness(const PlacementTable& table,
                                         const WorkerTokens& worker_tokens);

// Min over the MoE layers of `table` (those with replicas) of `per_layer` [num_layers]; 1 when
// there are none. The figure the coordinator judges.
double MinOverMoeLayers(const PlacementTable& table, absl::Span<const double> per_layer);

// Whether any worker processed any token (i.e. MeasuredBalancedness means something).
bool HasWorkerTokens(const WorkerTokens& worker_tokens);

class RecalibrationTransport {
 public:
  virtual ~RecalibrationTransport() = default;
  virtual int num_routers() const = 0;
  virtual absl::StatusOr<RouterLoadReport> GetStats(int router, absl::Duration window) = 0;
  // Returns once the router uses `table` and its calls under older versions drained.
  virtual absl::Status SetPlacement(int router, const PlacementTable& table) = 0;
  virtual absl::Status LoadExperts(const std::string& worker_address,
                                   const std::vector<model::ExpertKey>& keys) = 0;
  virtual absl::Status UnloadExperts(const std::string& worker_address,
                                     const std::vector<model::ExpertKey>& keys) = 0;
};

// Finishes a recalibration that stopped in step 2 (some routers switched to the new version,
// others not): every router behind the newest version among `reports` is switched to it (its
// replicas are resident: step 1 completed before any router switched), then the replicas that
// only the older tables placed are unloaded (step 3), and `reports` is updated to the newest
// table. Returns how many routers were switched (0 when all agree already: nothing is called).
// FAILED_PRECONDITION when two routers report the same version with different tables (no way to
// tell which one is meant); the transport's errors (rerunning converges).
absl::StatusOr<int> CompleteInterruptedSwitch(RecalibrationTransport& transport,
                                              std::vector<RouterLoadReport>& reports);

struct RecalibrationOptions {
  absl::Duration window = absl::Minutes(5);
  // Expert slots per worker and layer; 0 = the current most per worker + 1 (one redundant).
  int slots_per_worker = 0;
  // Compute and report only.
  bool dry_run = false;
};

struct RecalibrationReport {
  uint64_t previous_version = 0;
  uint64_t version = 0;
  int slots_per_worker = 0;
  uint64_t window_tokens = 0;               // all routers, all layers
  std::vector<double> balancedness_before;  // expected, per layer, under the old placement
  std::vector<double> balancedness_after;   // expected, under the new one
  int64_t experts_loaded = 0;               // (worker, layer, expert) replicas added
  int64_t experts_unloaded = 0;
  int routers_converged = 0;  // routers first switched to finish an interrupted recalibration
  PlacementTable placement;   // the new table
};

// Computes the next placement from `load` (no side effect): the report of a dry run.
// `slots_per_worker` 0 = the current most per worker + 1. FAILED_PRECONDITION when the placement
// has no workers; INVALID_ARGUMENT from the placement algorithm.
absl::StatusOr<RecalibrationReport> PlanRecalibration(const ClusterLoad& load,
                                                      int slots_per_worker);

// Steps 1-3 of the protocol from `from` to `to` over `transport` (every router, every worker).
// Errors: the transport's, as Recalibrate.
absl::Status ApplyRecalibration(RecalibrationTransport& transport, const PlacementTable& from,
                                const PlacementTable& to);

// Runs the protocol above (GetStats on every router, CompleteInterruptedSwitch unless dry_run,
// AggregateLoad, PlanRecalibration, then ApplyRecalibration unless dry_run). Errors:
// FAILED_PRECONDITION when routers disagree on the placement in a dry run or at the same
// version, or there is nothing to place; the transport's errors (a step that fails stops the
// protocol: after step 1 the extra replicas stay loaded and unused, after a partial step 2 the
// next run converges first).
absl::StatusOr<RecalibrationReport> Recalibrate(RecalibrationTransport& transport,
                                                const RecalibrationOptions& options);

// Replicas in `to` and not in `from`, per worker address (sorted keys).
std::map<std::string, std::vector<model::ExpertKey>> PlacementDiff(const PlacementTable& from,
                                                                   const PlacementTable& to);

}  // namespace moe::router
