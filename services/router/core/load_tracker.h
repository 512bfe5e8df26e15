// Expert load accounting over a sliding window (injected Clock): tokens routed to each
// (layer, expert), and tokens each expert worker processed per layer. GetStats exports the former
// (the input of recalibration); the latter gives the measured balancedness per layer.
//
// Time is split into buckets of `bucket` width; a window of span S sums the buckets that started
// within the last S (so it covers between S - bucket and S). Buckets older than `history` are
// dropped.
//
// Thread-safety: thread-safe (the scheduler thread records, gRPC threads read).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"

namespace moe::router {

// Tokens routed to one expert of a layer by one call.
struct ExpertTokens {
  int32_t expert_id = 0;
  int64_t tokens = 0;
};

struct LoadWindow {
  absl::Duration span;  // actually covered, <= the requested span
  int32_t num_layers = 0;
  int32_t num_experts = 0;
  std::vector<uint64_t> expert_tokens;  // [num_layers * num_experts]
  // worker id -> tokens it processed per layer [num_layers].
  std::map<int32_t, std::vector<uint64_t>> worker_tokens;

  // Measured balancedness of `layer`: mean / max over the workers in `worker_ids` of their
  // tokens (workers that processed nothing count as 0). 1 when nothing ran.
  double Balancedness(int32_t layer, absl::Span<const int32_t> worker_ids) const;
};

// DESIGN.md §5 metrics of expert load, with bounded cardinality: per-expert series only when
// num_layers * num_experts <= 1024; whatever the size, the kHotExperts hottest experts of each
// layer over the window as moe_expert_hot_share{layer, rank} (their share of the layer's tokens)
// and moe_expert_hot_id{layer, rank} (which expert), rank 1 = hottest.
struct ExpertLoadMetrics {
  static constexpr int kHotExperts = 4;
  ExpertLoadMetrics(common::metrics::Registry& r, int32_t num_layers, int32_t num_experts);
  common::metrics::Family<common::metrics::Gauge>& balancedness;  // {layer}
  common::metrics::Family<common::metrics::Counter>& tokens;      // {layer, expert}
  common::metrics::Family<common::metrics::Gauge>& hot_share;     // {layer, rank}
  common::metrics::Family<common::metrics::Gauge>& hot_id;        // {layer, rank}
  std::vector<common::metrics::Counter*> expert_tokens;  // [L*E] or empty (too many series)
};

class LoadTracker {
 public:
  // `clock` and `registry` are borrowed and must outlive the tracker.
  LoadTracker(int32_t num_layers, int32_t num_experts, common::Clock& clock,
              common::metrics::Registry& registry, absl::Duration bucket = absl::Seconds(1),
              absl::Duration history = absl::Minutes(15));

  // Adds the tokens one expert call of `layer` routed to each of its experts: work of the order
  // of the call (its experts), whatever the model's size. Out-of-range ids are ignored.
  void RecordLayerTokens(int32_t layer, absl::Span<const ExpertTokens> tokens);
  // Adds tokens worker `worker_id` processed on `layer`.
  void RecordWorkerTokens(int32_t layer, int32_t worker_id, int64_t tokens);

  // Sums of the last `span` (capped at the history kept).
  LoadWindow Window(absl::Duration span) const;

  // Sets moe_expert_balancedness{layer} from the window of `span` over `worker_ids`, and the
  // hot-expert gauges of every layer that routed tokens in it.
  void UpdateBalancednessGauges(absl::Duration span, absl::Span<const int32_t> worker_ids);

  int32_t num_layers() const { return num_layers_; }
  int32_t num_experts() const { return num_experts_; }

 private:
  struct Bucket {
    absl::Time start;
    std::vector<uint64_t> experts;
    std::map<int32_t, std::vector<uint64_t>> workers;
  };
  Bucket& CurrentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int32_t num_layers_;
  const int32_t num_experts_;
  common::Clock& clock_;
  const absl::Duration bucket_;
  const absl::Duration history_;
  const absl::Time created_;
  ExpertLoadMetrics metrics_;

  mutable absl::Mutex mu_;
  std::deque<Bucket> buckets_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace moe::router
