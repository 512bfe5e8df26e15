// EPLB-style expert placement (pure functions): from measured load per (layer, expert), replicate
// the hottest experts into the redundant slots, then pack the replicas onto workers so that
// their expected loads are balanced, honouring each worker's expert slots per layer.
//
// Load model: an expert's tokens split evenly over its replicas (the router sends each batch to
// the least-loaded replica). Balancedness of a layer = mean over workers of their load / the max
// over workers (1 = perfectly even; 1/W = everything on one worker).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "services/router/core/placement_table.h"

namespace moe::router {

// One layer's placement: for each expert, the worker indices [0, num_workers) of its replicas.
using LayerPlacement = std::vector<std::vector<int32_t>>;

// Places one layer's experts with load `load[e]` (>= 0) on `num_workers` workers with
// `slots_per_worker` expert slots each. Every expert gets >= 1 replica, a worker holds an expert
// at most once and at most slots_per_worker experts. Deterministic.
// InvalidArgument when num_workers * slots_per_worker < number of experts, or bad sizes.
absl::StatusOr<LayerPlacement> PlaceLayer(absl::Span<const double> load, int num_workers,
                                          int slots_per_worker);

// Expected tokens per worker under `placement` (each expert's load split evenly).
std::vector<double> ExpectedWorkerLoads(const LayerPlacement& placement,
                                        absl::Span<const double> load, int num_workers);

// mean / max of `worker_loads`; 1 when all are zero or the list is empty.
double Balancedness(absl::Span<const double> worker_loads);

// A new table (version `version`) over `current`'s workers (their order defines the indices)
// from `expert_tokens` [num_layers * num_experts] (row-major), with `slots_per_worker` slots
// per layer on each worker. The MoE layers are those with replicas in `current`.
// InvalidArgument as PlaceLayer, or for a window of another shape.
absl::StatusOr<PlacementTable> ComputePlacement(const PlacementTable& current,
                                                absl::Span<const uint64_t> expert_tokens,
                                                int slots_per_worker, uint64_t version);

// The most experts of one layer any worker holds in `table`.
int MaxExpertsPerWorker(const PlacementTable& table);

// Expected balancedness of each MoE layer of `table` under `expert_tokens` (dense layers: 1).
std::vector<double> ExpectedBalancedness(const PlacementTable& table,
                                         absl::Span<const uint64_t> expert_tokens);

}  // namespace moe::router
