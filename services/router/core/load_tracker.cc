#include "services/router/core/load_tracker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace moe::router {

double LoadWindow::Balancedness(int32_t layer, absl::Span<const int32_t> worker_ids) const {
  if (worker_ids.empty()) return 1.0;
  double sum = 0, max = 0;
  for (int32_t w : worker_ids) {
    auto it = worker_tokens.find(w);
    const double t = it == worker_tokens.end() ? 0.0 : static_cast<double>(it->second[layer]);
    sum += t;
    max = std::max(max, t);
  }
  return max > 0 ? sum / static_cast<double>(worker_ids.size()) / max : 1.0;
}

ExpertLoadMetrics::ExpertLoadMetrics(common::metrics::Registry& r, int32_t num_layers,
                                     int32_t num_experts)
    : balancedness(r.GaugeFamily("moe_expert_balancedness",
                                 "Mean over workers of tokens processed / the max, last window.")),
      tokens(r.CounterFamily("moe_expert_tokens_total",
                             "Tokens routed to each (layer, expert) (each top-k choice counts).")),
      hot_share(r.GaugeFamily("moe_expert_hot_share",
                              "Share of a layer's routed tokens of its rank-th hottest expert, "
                              "last window.")),
      hot_id(r.GaugeFamily("moe_expert_hot_id",
                           "Expert id of a layer's rank-th hottest expert, last window.")) {
  if (static_cast<int64_t>(num_layers) * num_experts > 1024) return;
  for (int32_t l = 0; l < num_layers; ++l) {
    for (int32_t e = 0; e < num_experts; ++e) {
      expert_tokens.push_back(
          &tokens.Add({{"layer", absl::StrCat(l)}, {"expert", absl::StrCat(e)}}));
    }
  }
}

LoadTracker::LoadTracker(int32_t num_layers, int32_t num_experts, common::Clock& clock,
                         common::metrics::Registry& registry, absl::Duration bucket,
                         absl::Duration history)
    : num_layers_(num_layers),
      num_experts_(num_experts),
      clock_(clock),
      bucket_(bucket),
      history_(history),
      created_(clock.Now()),
      metrics_(registry, num_layers, num_experts) {}

LoadTracker::Bucket& LoadTracker::CurrentLocked() {
  const absl::Time now = clock_.Now();
  const absl::Time start = created_ + bucket_ * std::max<int64_t>(0, (now - created_) / bucket_);
  if (buckets_.empty() || buckets_.back().start != start) {
    buckets_.push_back(
        {start, std::vector<uint64_t>(static_cast<size_t>(num_layers_) * num_experts_, 0), {}});
  }
  while (!buckets_.empty() && buckets_.front().start + bucket_ + history_ <= now) {
    buckets_.pop_front();
  }
  return buckets_.back();
}

void LoadTracker::RecordLayerTokens(int32_t layer, absl::Span<const ExpertTokens> tokens) {
  if (layer < 0 || layer >= num_layers_) return;
  const size_t base = static_cast<size_t>(layer) * num_experts_;
  {
    absl::MutexLock lock(&mu_);
    Bucket& b = CurrentLocked();
    for (const ExpertTokens& t : tokens) {
      if (t.expert_id < 0 || t.expert_id >= num_experts_ || t.tokens <= 0) continue;
      b.experts[base + t.expert_id] += static_cast<uint64_t>(t.tokens);
    }
  }
  if (!metrics_.expert_tokens.empty()) {
    for (const ExpertTokens& t : tokens) {
      if (t.expert_id < 0 || t.expert_id >= num_experts_ || t.tokens <= 0) continue;
      metrics_.expert_tokens[base + t.expert_id]->Increment(static_cast<double>(t.tokens));
    }
  }
}

void LoadTracker::RecordWorkerTokens(int32_t layer, int32_t worker_id, int64_t tokens) {
  if (layer < 0 || layer >= num_layers_) return;
  absl::MutexLock lock(&mu_);
  Bucket& b = CurrentLocked();
  auto& v = b.workers[worker_id];
  if (v.empty()) v.assign(static_cast<size_t>(num_layers_), 0);
  v[layer] += static_cast<uint64_t>(tokens);
}

LoadWindow LoadTracker::Window(absl::Duration span) const {
  LoadWindow w;
  w.num_layers = num_layers_;
  w.num_experts = num_experts_;
  w.expert_tokens.assign(static_cast<size_t>(num_layers_) * num_experts_, 0);
  const absl::Time now = clock_.Now();
  span = std::min(span, history_);
  const absl::Time from = now - span;
  absl::MutexLock lock(&mu_);
  for (const Bucket& b : buckets_) {
    if (b.start < from) continue;
    for (size_t i = 0; i < b.experts.size(); ++i) w.expert_tokens[i] += b.experts[i];
    for (const auto& [id, tokens] : b.workers) {
      auto& dst = w.worker_tokens[id];
      if (dst.empty()) dst.assign(static_cast<size_t>(num_layers_), 0);
      for (size_t l = 0; l < tokens.size(); ++l) dst[l] += tokens[l];
    }
  }
  w.span = std::min(span, now - created_);
  return w;
}

void LoadTracker::UpdateBalancednessGauges(absl::Duration span,
                                           absl::Span<const int32_t> worker_ids) {
  const LoadWindow w = Window(span);
  std::vector<int32_t> order(static_cast<size_t>(num_experts_));
  for (int32_t l = 0; l < num_layers_; ++l) {
    const std::string layer = absl::StrCat(l);
    metrics_.balancedness.Add({{"layer", layer}}).Set(w.Balancedness(l, worker_ids));
    const uint64_t* tokens = w.expert_tokens.data() + static_cast<size_t>(l) * num_experts_;
    uint64_t total = 0;
    for (int32_t e = 0; e < num_experts_; ++e) total += tokens[e];
    if (total == 0) continue;  // a dense layer, or no traffic in the window
    for (int32_t e = 0; e < num_experts_; ++e) order[e] = e;
    const int n = std::min<int>(ExpertLoadMetrics::kHotExperts, num_experts_);
    std::partial_sort(order.begin(), order.begin() + n, order.end(), [&](int32_t a, int32_t b) {
      return tokens[a] != tokens[b] ? tokens[a] > tokens[b] : a < b;
    });
    for (int rank = 0; rank < n; ++rank) {
      const common::metrics::Labels labels = {{"layer", layer}, {"rank", absl::StrCat(rank + 1)}};
      metrics_.hot_share.Add(labels).Set(static_cast<double>(tokens[order[rank]]) /
                                         static_cast<double>(total));
      metrics_.hot_id.Add(labels).Set(order[rank]);
    }
  }
}

}  // namespace moe::router
