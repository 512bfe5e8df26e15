// The expert placement table: which expert workers hold which (MoE layer, expert) pairs, under a
// version. Plain data (DESIGN.md §2): the router dispatches by it, `moe admin calibrate-router`
// computes new versions, SetPlacement switches to one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/model/checkpoint.h"
#include "common/model/model_config.h"

namespace moe::router {

struct PlacementWorker {
  int32_t worker_id = 0;
  std::string address;  // "host:port"
  friend bool operator==(const PlacementWorker&, const PlacementWorker&) = default;
};

struct PlacementTable {
  uint64_t version = 0;
  int32_t num_layers = 0;
  int32_t num_experts = 0;
  std::vector<PlacementWorker> workers;  // distinct ids
  // [num_layers * num_experts] replica worker ids (distinct per entry); empty on dense layers.
  std::vector<std::vector<int32_t>> replicas;

  const std::vector<int32_t>& Replicas(int64_t layer, int64_t expert) const {
    return replicas[static_cast<size_t>(layer * num_experts + expert)];
  }
  std::vector<int32_t>& MutableReplicas(int64_t layer, int64_t expert) {
    return replicas[static_cast<size_t>(layer * num_experts + expert)];
  }
  // nullptr when `worker_id` is not in the table.
  const PlacementWorker* FindWorker(int32_t worker_id) const;
  // worker id -> the (layer, expert) pairs it holds, sorted. Every worker of the table appears.
  std::map<int32_t, std::vector<model::ExpertKey>> ExpertsByWorker() const;
  // Dimensions match `config`, every (MoE layer, expert) has >= 1 replica, replica ids are
  // distinct and known, worker ids distinct, dense layers have none. InvalidArgument otherwise.
  absl::Status Validate(const model::ModelConfig& config) const;
  // "v3 w0=127.0.0.1:5000 ... | L0 E0:[0,1] E1:[2] ..." for logs and tests.
  std::string DebugString() const;
};

// The start-up placement from router config: `addresses[i]` is worker i. `specs` entries are
// "L:E=w1,w2", "L:E1-E2=w", "*:E=w" ('*' = every MoE layer); later specs add replicas. With no
// specs: round robin, expert e of every MoE layer on workers (e + i) % W for i < replicas.
// The version is 0 (the initial placement). InvalidArgument naming a bad spec.
absl::StatusOr<PlacementTable> BuildPlacement(const std::vector<std::string>& addresses,
                                              const std::vector<std::string>& specs, int replicas,
                                              const model::ModelConfig& config);

}  // namespace moe::router
