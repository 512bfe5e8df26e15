#include "services/router/core/placement_algorithm.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <queue>

#include "absl/strings/str_cat.h"

namespace moe::router {

absl::StatusOr<LayerPlacement> PlaceLayer(absl::Span<const double> load, int num_workers,
                                          int slots_per_worker) {
  const int num_experts = static_cast<int>(load.size());
  if (num_workers < 1 || slots_per_worker < 1 ||
      static_cast<int64_t>(num_workers) * slots_per_worker < num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(num_workers, " workers x ", slots_per_worker,
                                                   " slots cannot hold ", num_experts, " experts"));
  }
  // 1. Replication: every expert once, then each redundant slot to the expert whose per-replica
  // load is highest (ties: lower id), at most one replica per worker.
  std::vector<int> count(num_experts, 1);
  int spare = num_workers * slots_per_worker - num_experts;
  auto per_replica = [&](int e) { return load[e] / count[e]; };
  auto hotter = [&](int a, int b) {
    const double la = per_replica(a), lb = per_replica(b);
    return la != lb ? la < lb : a > b;  // max-heap on load, then lowest id first
  };
  std::priority_queue<int, std::vector<int>, decltype(hotter)> heap(hotter);
  for (int e = 0; e < num_experts; ++e) {
    if (load[e] > 0) heap.push(e);
  }
  while (spare > 0 && !heap.empty()) {
    const int e = heap.top();
    heap.pop();
    if (count[e] >= num_workers) continue;
    ++count[e];
    --spare;
    heap.push(e);
  }
  // 2. Packing (longest processing time first): replicas by decreasing per-replica load, each
  // onto the least-loaded worker with a free slot that does not hold the expert yet.
  struct Item {
    double load;
    int expert;
  };
  std::vector<Item> items;
  for (int e = 0; e < num_experts; ++e) {
    for (int r = 0; r < count[e]; ++r) items.push_back({per_replica(e), e});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.load != b.load ? a.load > b.load : a.expert < b.expert;
  });
  std::vector<double> worker_load(num_workers, 0.0);
  std::vector<int> used(num_workers, 0);
  LayerPlacement placement(num_experts);
  for (const Item& it : items) {
    int best = -1;
    for (int w = 0; w < num_workers; ++w) {
      if (used[w] >= slots_per_worker) continue;
      const auto& r = placement[it.expert];
      if (std::find(r.begin(), r.end(), w) != r.end()) continue;
      if (best < 0 || worker_load[w] < worker_load[best] ||
          (worker_load[w] == worker_load[best] && used[w] < used[best])) {
        best = w;
      }
    }
    // Only a redundant replica can find no worker (the free slots are all on workers that
    // already hold it): drop it.
    if (best < 0) continue;
    placement[it.expert].push_back(best);
    worker_load[best] += it.load;
    ++used[best];
  }
  for (auto& r : placement) std::sort(r.begin(), r.end());
  return placement;
}

std::vector<double> ExpectedWorkerLoads(const LayerPlacement& placement,
                                        absl::Span<const double> load, int num_workers) {
  std::vector<double> out(num_workers, 0.0);
  for (size_t e = 0; e < placement.size(); ++e) {
    if (placement[e].empty()) continue;
    const double share = load[e] / static_cast<double>(placement[e].size());
    for (int32_t w : placement[e]) out[w] += share;
  }
  return out;
}

double Balancedness(absl::Span<const double> worker_loads) {
  if (worker_loads.empty()) return 1.0;
  const double max = *std::max_element(worker_loads.begin(), worker_loads.end());
  if (max <= 0) return 1.0;
  const double mean = std::accumulate(worker_loads.begin(), worker_loads.end(), 0.0) /
                      static_cast<double>(worker_loads.size());
  return mean / max;
}

absl::StatusOr<PlacementTable> ComputePlacement(const PlacementTable& current,
                                                absl::Span<const uint64_t> expert_tokens,
                                                int slots_per_worker, uint64_t version) {
  const int64_t ne = current.num_experts;
  if (expert_tokens.size() != static_cast<size_t>(current.num_layers * ne)) {
    return absl::InvalidArgumentError("expert load window does not match the placement's shape");
  }
  PlacementTable next = current;
  next.version = version;
  const int num_workers = static_cast<int>(current.workers.size());
  for (int64_t l = 0; l < current.num_layers; ++l) {
    if (current.Replicas(l, 0).empty()) continue;  // a dense layer
    std::vector<double> load(static_cast<size_t>(ne));
    for (int64_t e = 0; e < ne; ++e) load[e] = static_cast<double>(expert_tokens[l * ne + e]);
    auto layer = PlaceLayer(load, num_workers, slots_per_worker);
    if (!layer.ok()) return layer.status();
    for (int64_t e = 0; e < ne; ++e) {
      auto& r = next.MutableReplicas(l, e);
      r.clear();
      for (int32_t w : (*layer)[e]) r.push_back(current.workers[w].worker_id);
    }
  }
  return next;
}

int MaxExpertsPerWorker(const PlacementTable& table) {
  int most = 0;
  for (int64_t l = 0; l < table.num_layers; ++l) {
    std::map<int32_t, int> n;
    for (int64_t e = 0; e < table.num_experts; ++e) {
      for (int32_t w : table.Replicas(l, e)) most = std::max(most, ++n[w]);
    }
  }
  return most;
}

std::vector<double> ExpectedBalancedness(const PlacementTable& table,
                                         absl::Span<const uint64_t> expert_tokens) {
  std::vector<double> out;
  const int64_t ne = table.num_experts;
  std::vector<int32_t> index_of;  // worker id -> index
  for (size_t i = 0; i < table.workers.size(); ++i) {
    const int32_t id = table.workers[i].worker_id;
    if (id >= static_cast<int32_t>(index_of.size())) index_of.resize(id + 1, -1);
    index_of[id] = static_cast<int32_t>(i);
  }
  for (int64_t l = 0; l < table.num_layers; ++l) {
    LayerPlacement p(static_cast<size_t>(ne));
    std::vector<double> load(static_cast<size_t>(ne));
    bool moe = false;
    for (int64_t e = 0; e < ne; ++e) {
      load[e] = static_cast<double>(expert_tokens[l * ne + e]);
      for (int32_t w : table.Replicas(l, e)) p[e].push_back(index_of[w]);
      moe = moe || !p[e].empty();
    }
    out.push_back(
        moe ? Balancedness(ExpectedWorkerLoads(p, load, static_cast<int>(table.workers.size())))
            : 1.0);
  }
  return out;
}

}  // namespace moe::router
