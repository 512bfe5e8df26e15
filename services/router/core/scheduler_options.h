// Configuration of the router's scheduler (scheduler.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"

namespace moe::router {

// What happens to a running sequence when the KV cache cannot give it a block.
enum class PreemptionMode : uint8_t {
  // Free its blocks and requeue it at the front of the waiting queue; its tokens so far are kept
  // and re-prefilled (often from the L1 prefix cache) when it is admitted again.
  kRecompute,
  // As kRecompute, but its computed blocks are kept in the kv-store's L2 (stored before they
  // are freed, when not already) and fetched back when it is admitted again, instead of being
  // recomputed. Without a kv-store this is kRecompute.
  kOffload,
};

struct SchedulerOptions {
  // Sequences running at once (holding KV blocks). More = more batching, more KV pressure.
  int64_t max_num_seqs = 256;
  // Tokens (prefill chunks + decode tokens) in one engine step: the per-step token budget. Bigger
  // steps raise throughput and the latency of every token in the step.
  int64_t max_batch_tokens = 2048;
  // Requests queued and not yet admitted; Submit beyond it is RESOURCE_EXHAUSTED (shed load).
  int64_t max_waiting = 1024;
  // Most prompt tokens of one sequence in one step. Smaller chunks keep decodes flowing while a
  // long prompt prefills; larger ones prefill faster.
  int64_t chunked_prefill_size = 512;
  PreemptionMode preemption_mode = PreemptionMode::kRecompute;
  // Tokens buffered per request for a slow consumer before that request stops being decoded.
  int64_t stream_capacity = 256;
  // Token ids that end a request with "stop" unless its sampling params say ignore_eos (the
  // model's EOS ids; main.cc fills them from the checkpoint).
  std::vector<int32_t> eos_token_ids;
  // Seeds the per-request seeds drawn for requests that give none.
  uint64_t random_seed = 0x5eed;
  // The kv tier's asynchronous fetches (scheduler.h; used only with a kv-store): fetch threads,
  // fetches queued or running at once, and the bytes of blocks they may ask for together. A
  // sequence that finds them all taken prefills its prefix instead of fetching it.
  int64_t kv_fetch_threads = 4;
  int64_t kv_fetch_max_fetches = 16;
  int64_t kv_fetch_max_bytes = 512ll << 20;
  // A fetch costs a round trip to the kv-store and a turn of the scheduler even when it finds
  // nothing (the blocks past the last L1 hit are often the prompt's new tail, which no tier
  // holds). It is started only when prefilling the blocks L1 missed is estimated (measured
  // prefill throughput) to take at least this long; below, the sequence prefills them. Before
  // the first estimate every miss is fetched.
  absl::Duration kv_fetch_min_saving = absl::Milliseconds(5);
  // Whether the blocks of generated tokens go to the kv-store too (the prompt's full blocks
  // always do; an offloaded preemption stores every computed block). Off: a decode-heavy load
  // sends its prompts' blocks only, not 64 KiB of f32 K/V per 16 generated tokens (small
  // preset) through Put and the L3 write-behind, which on a 2-core machine cost a fifth of the
  // served decode throughput; what is lost is the last answer of a conversation once L1 evicts
  // it (the next turn's prompt holds it, and stores it then).
  bool store_generated_blocks = false;

  static void Describe(common::config::Schema<SchedulerOptions>& s) {
    s.Add("max_num_seqs", &SchedulerOptions::max_num_seqs, "sequences running at once")
        .Range(1, 1 << 20);
    s.Add("max_batch_tokens", &SchedulerOptions::max_batch_tokens, "token budget of one step")
        .Range(1, 1 << 24);
    s.Add("max_waiting", &SchedulerOptions::max_waiting,
          "queued requests; beyond it Generate is RESOURCE_EXHAUSTED")
        .Range(1, 1 << 24);
    s.Add("chunked_prefill_size", &SchedulerOptions::chunked_prefill_size,
          "most prompt tokens of one sequence per step")
        .Range(1, 1 << 24);
    s.AddEnum("preemption_mode", &SchedulerOptions::preemption_mode,
              {{"recompute", PreemptionMode::kRecompute}, {"offload", PreemptionMode::kOffload}},
              "what a preempted sequence does: recompute its KV, or offload it to the kv-store");
    s.Add("stream_capacity", &SchedulerOptions::stream_capacity,
          "tokens buffered per request before it is held back")
        .Range(1, 1 << 20);
    s.Add("eos_token_ids", &SchedulerOptions::eos_token_ids,
          "token ids that end a request (default: the model's)")
        .Min(0);
    s.Add("random_seed", &SchedulerOptions::random_seed, "seeds requests that give no seed");
    s.Add("kv_fetch_threads", &SchedulerOptions::kv_fetch_threads,
          "threads running kv-store fetches (off the stepping thread)")
        .Range(1, 64);
    s.Add("kv_fetch_max_fetches", &SchedulerOptions::kv_fetch_max_fetches,
          "kv-store fetches queued or running; beyond: the sequence prefills")
        .Range(1, 1 << 16);
    s.Add("kv_fetch_max_bytes", &SchedulerOptions::kv_fetch_max_bytes,
          "bytes of blocks the fetches in flight may ask for; beyond: trimmed or prefilled")
        .Range(1, int64_t{1} << 40);
    s.Add("kv_fetch_min_saving", &SchedulerOptions::kv_fetch_min_saving,
          "fetch only prefixes whose prefill is estimated to take at least this long")
        .Min(absl::ZeroDuration());
    s.Add("store_generated_blocks", &SchedulerOptions::store_generated_blocks,
          "store the blocks of generated tokens in the kv-store too (prompt blocks always are)");
  }
  // INVALID_ARGUMENT naming the first bad field.
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

}  // namespace moe::router
