// An in-memory cluster behind RecalibrationTransport, for the recalibration protocol's and the
// coordinator's tests: one MoE layer of 6 experts on three workers w0..w2 (expert e on worker
// e % 3), `num_routers` routers on placement version 0. Tests read and set its state directly.
//
// Thread-compatible (tests call it from one thread).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/model/expert_spec.h"
#include "services/router/core/placement_table.h"
#include "services/router/core/recalibration.h"

namespace moe::router::testing {

class FakeRecalibrationTransport : public RecalibrationTransport {
 public:
  explicit FakeRecalibrationTransport(int num_routers = 1);

  // What every router's GetStats reports: `expert_tokens` [6] per router, and the tokens each
  // worker processed, which follow from router 0's placement (an expert's tokens split evenly
  // over its replicas) unless `worker_tokens` is given (WorkerTokens{}: a router that does not
  // measure them).
  void SetLoad(std::vector<uint64_t> expert_tokens,
               std::optional<WorkerTokens> worker_tokens = std::nullopt);
  // Expert 0 is hot: worker 0 processes most tokens (per router). The default load.
  void SetSkewed() { SetLoad({600, 100, 100, 100, 50, 50}); }
  // Even load: every worker processes the same.
  void SetEven() { SetLoad({100, 100, 100, 100, 100, 100}); }

  // RecalibrationTransport
  int num_routers() const override { return static_cast<int>(active_.size()); }
  absl::StatusOr<RouterLoadReport> GetStats(int router, absl::Duration window) override;
  absl::Status SetPlacement(int router, const PlacementTable& table) override;
  absl::Status LoadExperts(const std::string& worker,
                           const std::vector<model::ExpertKey>& keys) override;
  absl::Status UnloadExperts(const std::string& worker,
                             const std::vector<model::ExpertKey>& keys) override;

  // The protocol's invariant, checked (gtest EXPECTs) after every SetPlacement and UnloadExperts
  // when `check_live_replicas_`: each expert of every router's active table is resident on every
  // worker that the table names for it.
  void CheckLiveReplicas();

  // State, read and set by tests.
  std::vector<PlacementTable> active_;                          // per router
  std::map<std::string, std::set<model::ExpertKey>> resident_;  // per worker address
  std::vector<uint64_t> expert_tokens_;
  WorkerTokens worker_tokens_;
  std::set<absl::Duration> windows_;  // every window GetStats was asked for
  std::string log_;                   // "stats0 load set0 unload " in call order
  bool check_live_replicas_ = false;
  bool stats_error_ = false;  // GetStats answers UNAVAILABLE
  int load_failures_ = 0;     // the next N LoadExperts answer UNAVAILABLE
};

}  // namespace moe::router::testing
