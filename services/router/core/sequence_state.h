// What the scheduler's stages (schedule_stages.h) know of one request, and the one order both of
// its queues keep.
//
// Plain data. The scheduler's own record of a request (its stream, sampler and timings, in
// scheduler.cc) extends SequenceState; the stages read and update only these fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/base/ids.h"

namespace moe::router {

struct SequenceState {
  common::SeqId seq_id;         // grows with arrival
  int32_t priority = 0;         // GenerateRequest::priority: lower is scheduled first
  std::string cache_salt;       // GenerateRequest::cache_salt: the prefix-cache namespace
  std::vector<int32_t> tokens;  // [num_tokens] the prompt, then the generated tokens
  // While running: the tokens that have a KV slot, and those whose K/V the engine has written.
  // They mirror the block manager's SequenceInfo (num_tokens, num_computed_tokens), which the
  // stages keep in step. Both 0 while waiting.
  int64_t num_slots = 0;
  int64_t num_computed = 0;
  bool running = false;  // holds KV blocks, and is in the running queue
  // Running, and waiting for its further prompt prefix from the kv tier (scheduler.h): its
  // uncomputed pages are being written by a fetch thread, so no stage plans a chunk for it.
  bool fetching = false;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // Running, with a newest token (sampled last step) that has no KV slot yet: it decodes next.
  bool is_decode() const { return num_slots < num_tokens(); }
};

// The order of both queues: lower priority value first, then earlier arrival (lower seq id).
// The running queue's last entry is therefore the first to be preempted, and a preempted
// sequence goes back ahead of every later arrival of its priority.
struct SchedulingOrder {
  bool operator()(const SequenceState* a, const SequenceState* b) const {
    if (a->priority != b->priority) return a->priority < b->priority;
    return a->seq_id < b->seq_id;
  }
};

}  // namespace moe::router
