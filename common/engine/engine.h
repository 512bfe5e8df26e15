// The MoE forward pass over a batch of sequence chunks.
//
// One Step() runs any mix of prefill chunks (any length) and decode tokens of many sequences
// together and returns the logits the caller asked for. The engine owns the K/V tensor storage
// (KvCache) but not its accounting: every item brings its sequence's block table, and the caller
// (the router's block manager, or the simple Generator) decides which blocks a sequence owns.
//
// Batch invariance (DESIGN.md §3): a row's logits are bitwise identical whatever else shares the
// step and however its prefill was chunked, because every kernel computes each output element by
// a fixed sequence of operations on that row alone, attention visits keys in position order, and
// the engine combines expert outputs in each token's top-k order.
//
// Architectures: Mixtral, Qwen2-MoE (q/k/v bias, shared expert with sigmoid gate,
// norm_topk_prob), Qwen3-MoE (per-head q/k RMSNorm), OLMoE (q/k RMSNorm over the projection).
// All activation math is f32 (by default; see EngineOptions::activations); weights f32/bf16/f16
// as stored, or the projections in q8_0 (EngineOptions::weights).
//
// Thread-safety: not thread-safe. One thread (the router's scheduler loop, the Generator's
// caller) calls Step() and the accessors; Step() forks work onto the engine's thread pool and
// calls the ExpertExecutor from that thread only (expert_executor.h). The scratch a step needs is
// sized for max_batch_tokens at Create() and reused, so steady-state steps allocate nothing
// (buffers of `out` and of the wanted logits rows grow to the largest step seen).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/expert_executor.h"
#include "common/engine/kv_cache.h"
#include "common/kernels/kernels.h"
#include "common/kernels/thread_pool.h"
#include "common/model/model_config.h"
#include "common/model/weights.h"

namespace moe::engine {

struct EngineOptions {
  int num_threads = 1;                   // threads of the engine's pool, caller included
  int64_t kv_cache_bytes = 256ll << 20;  // K+V budget of all layers
  int64_t kv_num_blocks = 0;             // > 0: exact block count (overrides the budget)
  int64_t block_size = 16;               // tokens per KV block
  int64_t max_batch_tokens = 2048;       // most tokens (all items) in one Step
  // Micro-batch ping-pong when the experts run concurrently (ExpertExecutor::RunsConcurrently):
  // a step of at least `micro_batch_min_tokens` tokens and two or more items is split into two
  // micro-batches at an item boundary, and the dense part (attention, gate, shared expert) of
  // one runs while the routed experts of the other are away. 1 = never split. Results are
  // bitwise the same either way (batch invariance).
  int micro_batches = 2;
  int64_t micro_batch_min_tokens = 8;
  // Activation numerics of the projections (q/k/v/o) and the FFNs (dense MLP, shared expert, and
  // the routed experts when the engine owns its LocalExpertExecutor; a given executor brings its
  // own setting, which must match). kBf16 (kernels.h BF16-ACTIVATION MODE) is an opt-in,
  // cluster-wide setting: faster prefill with bf16 weights on AVX-512 BF16 CPUs, still bitwise
  // batch- and chunk-invariant, but no longer the bits of kF32: on the tiny/small presets logits
  // stay within 3% of the largest |logit| of kF32's (measured <= 1.5%) while tokens route to the
  // same experts; a near-tied gate may route a token differently, and from there the sequences
  // legitimately differ (engine_bf16_test). Router gates, attention, norms, softmax and lm_head
  // stay f32 in both modes.
  kernels::Activations activations = kernels::Activations::kF32;
  // The weight numerics the weights were loaded in (model::LoadOptions::weights; opt-in kQ8_0:
  // kernels.h INT8 WEIGHTS, W8A8, which ignores `activations` for the quantized projections).
  // Create() checks the weights agree; the engine tags its expert calls with it so that a worker
  // loaded otherwise refuses them.
  model::WeightsMode weights = model::WeightsMode::kCheckpoint;
  // InvalidArgument naming the field when a value is out of range.
  absl::Status Validate() const;
};

// Which logits an item wants.
enum class LogitsMode : uint8_t {
  kNone,  // none (a prefill chunk that is not the prompt's last)
  kLast,  // after the chunk's last token (decode, or the last prefill chunk)
  kAll,   // after every token of the chunk (teacher-forced scoring)
};

// One chunk of one sequence. Spans are borrowed for the duration of Step().
struct StepItem {
  absl::Span<const int32_t> token_ids;    // >= 1 tokens at positions start_pos, start_pos+1, ...
  int32_t start_pos = 0;                  // positions < start_pos must already be in the cache
  absl::Span<const int32_t> block_table;  // block ids for positions 0 .. start_pos+n-1 (or more)
  LogitsMode logits = LogitsMode::kLast;
};

struct StepOutput {
  // [num_rows, vocab]: item i's rows are row_begin[i] .. row_begin[i+1]-1, in token order.
  std::vector<float> logits;
  std::vector<int64_t> row_begin;  // items + 1 entries
  // Tokens routed to each expert this step, [num_layers * num_experts] (layer-major); the router's
  // load statistics read it. Dense layers count nothing.
  std::vector<int64_t> expert_tokens;
  // Per item: OK, or UNAVAILABLE when a token of the item was routed to an expert that had no
  // live replica (ExpertExecutor::AwaitPartial). Such an item's logits and the K/V it wrote this
  // step are garbage; every other item is exact. The caller ends the failed items' sequences.
  std::vector<absl::Status> item_status;

  int64_t num_rows(size_t item) const { return row_begin[item + 1] - row_begin[item]; }
  // REQUIRES: row < num_rows(item).
  const float* row(size_t item, int64_t row, int64_t vocab) const {
    return logits.data() + (row_begin[item] + row) * vocab;
  }
};

class Engine {
 public:
  // `config` and `weights` are borrowed and must outlive the engine (they point into the
  // memory-mapped checkpoint). `experts` runs the expert FFNs; null = a LocalExpertExecutor over
  // `weights` on the engine's pool. When given, it is borrowed.
  // Errors: InvalidArgument (bad options; config/weights missing a tensor the arch needs),
  // ResourceExhausted (KV cache allocation).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const model::ModelConfig& config,
                                                        const model::ModelWeights& weights,
                                                        const EngineOptions& options,
                                                        ExpertExecutor* experts = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Runs the forward pass over `items` (at most one item per sequence per step), writes each
  // token's K/V into its block-table slot, and fills `out` (its buffers are reused across steps).
  // Errors (nothing is written to the cache then): InvalidArgument for an empty chunk, a token id
  // outside the vocabulary, a block table too short or naming a block outside the cache, or more
  // than max_batch_tokens tokens; the expert executor's error (the cache may then hold K/V of
  // this step's tokens, which the caller should treat as not written).
  absl::Status Step(absl::Span<const StepItem> items, StepOutput* out);

  const model::ModelConfig& config() const;
  const EngineOptions& options() const;
  int64_t vocab_size() const;
  // The K/V storage the block tables index. Mutating it (CopyBlock) must not overlap a Step().
  KvCache& kv_cache();
  // The engine's thread pool (callers may borrow it between steps, e.g. for benchmarks).
  kernels::ThreadPool* pool();

 private:
  class Impl;  // the forward pass and its per-step scratch (engine.cc)
  explicit Engine(std::unique_ptr<Impl> impl);

  const std::unique_ptr<Impl> impl_;
};

}  // namespace moe::engine
