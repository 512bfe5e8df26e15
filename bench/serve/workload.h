// The serving benchmark's workloads (`moe bench serve`): what requests to send and when, as
// plain data, with no network. A workload is a list of ServeRequest; the load client
// (bench/common/sse_load.h) sends them, the stats (serve_stats.h) summarise what came back.
//
//   arrivals:  PoissonArrivals (open loop at a rate; gamma gaps for burstiness, as vLLM's
//              --burstiness), or all at t=0 with a concurrency cap in the client (closed loop)
//   prompts:   RandomWorkload (mixed lengths, optional shared system prompt),
//              MultiTurnWorkload (chats that grow turn by turn; turn k waits for turn k-1),
//              Mooncake traces (ParseMooncakeTrace / SyntheticTrace / TraceToRequests)
//
// Prompts are token ids (the gateway's and llama-server's /v1/completions both take them), so
// both systems see exactly the same tokens and a shared prefix is shared exactly, whatever the
// tokenizer. Every generator is deterministic in its seed.
//
// A new workload kind (tier hit rates with the kv-store, voice stages) is one more generator
// returning std::vector<ServeRequest>, plus one entry in the serve suite's scenario table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::bench::serve {

struct ServeRequest {
  double arrival_s = 0;         // earliest send time, seconds after the run starts
  std::vector<int32_t> prompt;  // token ids
  int32_t max_tokens = 16;      // output tokens (sent with ignore_eos: exactly this many)
  int32_t after = -1;           // >= 0: sent only once request `after` has finished...
  double after_delay_s = 0;     // ...plus this think time (multi-turn chats)
};

// Arrival times of `count` requests at `rate` per second: gaps are Gamma(burstiness, 1 /
// (rate * burstiness)), so burstiness 1 is Poisson, < 1 burstier, > 1 more regular. rate <= 0 or
// infinite: every arrival at 0 (a closed loop; the client's concurrency cap paces it).
// The first arrival is at its first gap (as vLLM), sorted ascending. Deterministic in `seed`.
std::vector<double> PoissonArrivals(int count, double rate, double burstiness, uint64_t seed);

struct RandomWorkloadOptions {
  int num_requests = 16;
  int32_t input_min = 32, input_max = 32;      // prompt tokens, uniform in [min, max]
  int32_t output_min = 128, output_max = 128;  // output tokens, uniform in [min, max]
  int32_t shared_prefix = 0;  // tokens of one system prompt in front of every prompt
  int32_t vocab_size = 1024;  // ids drawn from [kFirstTokenId, vocab_size)
  uint64_t seed = 1;
};
// The low ids are the preset tokenizers' special tokens; random prompts stay above them.
inline constexpr int32_t kFirstTokenId = 16;

// Distinct random prompts (each its own seed stream, so no two share a prefix beyond
// `shared_prefix`); arrival_s = 0 (set it from PoissonArrivals). kInvalidArgument on empty or
// inverted ranges, or a vocabulary without room above kFirstTokenId.
absl::StatusOr<std::vector<ServeRequest>> RandomWorkload(const RandomWorkloadOptions& options);

struct MultiTurnOptions {
  int num_chats = 4;
  int turns = 4;
  int32_t system_tokens = 256;  // one system prompt shared by every chat
  int32_t user_tokens = 32;     // new tokens per turn
  int32_t output_tokens = 32;   // answer per turn
  double think_s = 0;           // between an answer and the next question
  int32_t vocab_size = 1024;
  uint64_t seed = 1;
};
// Turn k of chat c has prompt = system + (user_1, answer_1, ..., user_k), where answer_i is a
// stand-in of output_tokens ids (the client does not feed the real answer back, so turn k's
// cached prefix is turn k-1's prompt); turn k (k > 1) waits for turn k-1 (`after`). Requests are
// ordered chat by chat. Chats start at 0 (set arrival_s of first turns for open loop).
absl::StatusOr<std::vector<ServeRequest>> MultiTurnWorkload(const MultiTurnOptions& options);

// One line of a Mooncake trace (FAST'25 Mooncake traces; JSON lines):
//   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}
// timestamp in ms from the trace's start; hash_ids name the prompt's blocks of kTraceBlockTokens
// tokens in order (equal ids = equal content, so shared prefixes are shared ids).
struct TraceEntry {
  int64_t timestamp_ms = 0;
  int32_t input_length = 0;
  int32_t output_length = 0;
  std::vector<int64_t> hash_ids;
};
inline constexpr int32_t kTraceBlockTokens = 512;

// Parses JSON lines (blank lines skipped). kInvalidArgument naming the line number for bad
// JSON, missing or negative fields, hash_ids that cannot cover input_length (fewer than
// ceil(input_length / block_tokens) ids), or timestamps that go backwards.
absl::StatusOr<std::vector<TraceEntry>> ParseMooncakeTrace(
    std::string_view text, int32_t block_tokens = kTraceBlockTokens);
// One JSON line per entry, in the field order above; ParseMooncakeTrace reads it back exactly.
std::string FormatMooncakeTrace(const std::vector<TraceEntry>& entries);

struct SyntheticTraceOptions {
  int num_requests = 64;
  double rate = 2;             // requests/s, Poisson
  int num_prefixes = 4;        // distinct shared prefixes (system prompts / documents)...
  int32_t prefix_blocks = 2;   // ...of this many blocks each
  double prefix_share = 0.75;  // probability that a request starts with one of them
  int32_t input_min = 256, input_max = 2048;  // prompt tokens, uniform (>= the prefix's tokens)
  int32_t output_min = 16, output_max = 256;
  int32_t block_tokens = kTraceBlockTokens;
  uint64_t seed = 1;
};
// A trace in Mooncake's format: prefixes drawn Zipf-like (prefix i with weight 1/(i+1)), unique
// blocks get fresh ids. kInvalidArgument on bad ranges.
absl::StatusOr<std::vector<TraceEntry>> SyntheticTrace(const SyntheticTraceOptions& options);

struct TraceReplayOptions {
  int32_t block_tokens = kTraceBlockTokens;
  double time_scale = 1;   // arrival_s = timestamp_ms / 1000 * time_scale
  int32_t max_input = 0;   // > 0: clip prompts to this many tokens (small contexts)
  int32_t max_output = 0;  // > 0: clip outputs
  int32_t vocab_size = 1024;
  uint64_t seed = 1;  // the content of block id h is a function of (seed, h) only
};
// Requests replaying the trace: each block id becomes the same block_tokens ids wherever it
// occurs; the prompt is the first input_length tokens of its blocks. kInvalidArgument on a
// vocabulary without room.
absl::StatusOr<std::vector<ServeRequest>> TraceToRequests(const std::vector<TraceEntry>& trace,
                                                          const TraceReplayOptions& options);

}  // namespace moe::bench::serve
