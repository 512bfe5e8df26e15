#include "services/gateway/core/router_picker.h"

#include <algorithm>
#include <limits>

#include "common/base/check.h"
#include "common/base/hash.h"

namespace moe::gateway {
namespace {

double Load(const RouterLoad& l, const RouterPickerOptions& o) {
  const double queued = static_cast<double>(l.num_waiting) + l.num_running + l.local_in_flight;
  return queued / std::max(1e-9, o.queue_scale) + l.kv_usage_ratio;
}

}  // namespace

kv::BlockHash AffinityKey(const kv::BlockHash& root, absl::Span<const int32_t> prompt,
                          int32_t block_size, int32_t affinity_blocks) {
  MOE_CHECK(block_size > 0);
  const size_t full = prompt.size() / block_size;
  if (full == 0 || affinity_blocks <= 0) return kv::HashBlock(root, prompt);
  const size_t blocks = std::min<size_t>(full, affinity_blocks);
  std::vector<kv::BlockHash> chain =
      kv::HashFullBlocks(root, prompt.subspan(0, blocks * block_size), block_size);
  return chain.back();
}

uint64_t RendezvousScore(const kv::BlockHash& key, const std::string& router_id) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the id
  for (unsigned char c : router_id) h = (h ^ c) * 0x100000001b3ULL;
  return common::SplitMix64(common::SplitMix64(key.lo ^ h) ^ key.hi);
}

std::vector<int> OrderRouters(const kv::BlockHash& key, const std::vector<std::string>& router_ids,
                              const std::vector<RouterLoad>& loads,
                              const RouterPickerOptions& options) {
  MOE_CHECK(router_ids.size() == loads.size());
  std::vector<int> order(router_ids.size());
  std::vector<uint64_t> score(router_ids.size());
  for (size_t i = 0; i < order.size(); ++i) {
    order[i] = static_cast<int>(i);
    score[i] = RendezvousScore(key, router_ids[i]);
  }
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    if (score[a] != score[b]) return score[a] > score[b];
    return a < b;
  });
  double min_load = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < loads.size(); ++i) {
    if (loads[i].healthy) min_load = std::min(min_load, Load(loads[i], options));
  }
  std::vector<int> result;
  result.reserve(order.size());
  int chosen = -1;
  for (int i : order) {
    if (loads[i].healthy && Load(loads[i], options) <= min_load + options.load_slack) {
      chosen = i;
      break;
    }
  }
  if (chosen >= 0) result.push_back(chosen);
  for (int i : order) {
    if (i != chosen && loads[i].healthy) result.push_back(i);
  }
  for (int i : order) {
    if (!loads[i].healthy) result.push_back(i);
  }
  return result;
}

}  // namespace moe::gateway
