// Choice of router for a request: prefix affinity balanced against load.
//
// Affinity: the key is the KV hash chain (common/kv/block_hash.h, the same identity the routers'
// caches use) of the prompt's first `affinity_blocks` full blocks; routers are ranked by
// rendezvous (highest-random-weight) hashing of (key, router id), so a prefix keeps going to the
// same router while the set of routers is stable, and only 1/N of prefixes move when one
// joins or leaves.
// Load: load(r) = (waiting + running + local in-flight) / queue_scale + kv_usage_ratio.
// Rule: in rendezvous order, the first healthy router whose load <= min load + load_slack wins;
// the other healthy routers follow in rendezvous order (retry candidates), then unhealthy ones
// (tried last, in case the health view is stale).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "common/kv/block_hash.h"

namespace moe::gateway {

struct RouterLoad {
  bool healthy = true;
  int32_t num_waiting = 0;
  int32_t num_running = 0;
  double kv_usage_ratio = 0;    // [0, 1]
  int64_t local_in_flight = 0;  // requests this gateway has sent and not seen finish
};

struct RouterPickerOptions {
  int32_t affinity_blocks = 4;  // leading full blocks that form the affinity key
  double queue_scale = 8;       // requests that count as one unit of load
  double load_slack = 0.5;      // extra load tolerated to keep affinity

  // The KV namespace (must match the routers' block size and dtype to share their hashes).
  kv::BlockHashRootKey root;
};

// The affinity key of a prompt: the chain hash of its first min(affinity_blocks, full blocks)
// blocks; for a prompt shorter than one block, the hash of its tokens under the root.
kv::BlockHash AffinityKey(const kv::BlockHash& root, absl::Span<const int32_t> prompt,
                          int32_t block_size, int32_t affinity_blocks);

// A stable 64-bit score of (key, router id): the rendezvous weight.
uint64_t RendezvousScore(const kv::BlockHash& key, const std::string& router_id);

// Indices into `router_ids` (== loads.size()) in the order to try them (see the rule above).
std::vector<int> OrderRouters(const kv::BlockHash& key, const std::vector<std::string>& router_ids,
                              const std::vector<RouterLoad>& loads,
                              const RouterPickerOptions& options);

}  // namespace moe::gateway
