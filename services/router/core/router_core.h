// Everything the router runs in-process, wired: the checkpoint (memory-mapped), the engine with
// its experts in-process (LocalExpertExecutor; RemoteExpertExecutor puts them across the network),
// the L1 block manager over the engine's KV cache, and the scheduler. No gRPC: main.cc, the
// server test and `moe bench router` all build the router through this.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/engine/engine.h"
#include "common/grammar/grammar_cache.h"
#include "common/kv/block_hash.h"
#include "common/metrics/registry.h"
#include "common/model/checkpoint.h"
#include "services/router/core/engine_model_runner.h"
#include "services/router/core/kv_tier.h"
#include "services/router/core/router_metrics.h"
#include "services/router/core/scheduler.h"
#include "services/router/core/scheduler_options.h"

namespace moe::router {

struct RouterCoreOptions {
  // Hugging Face checkpoint directory (config.json + *.safetensors). Required.
  std::string model_dir;
  // The model id served (the `model` metric label, GenerateRequest.model); "" = the directory's
  // base name.
  std::string model_name;
  // Engine threads (the caller included). More = faster steps, fewer cores for the rest.
  int num_threads = 2;
  // L1 KV budget for K+V of all layers, bytes; the pool is budget / bytes-per-block blocks.
  int64_t kv_cache_bytes = 256ll << 20;
  // > 0: exactly this many KV blocks (overrides kv_cache_bytes).
  int64_t kv_num_blocks = 0;
  // Tokens per KV block (the prefix-cache granularity).
  int block_size = 16;
  // Automatic prefix caching of full KV blocks (off = every prompt is prefilled in full).
  bool enable_prefix_caching = true;
  // Remote experts only: split a step into this many micro-batches (2 = ping-pong: attention of
  // one while the experts of the other are away; 1 = off), when it has at least
  // micro_batch_min_tokens tokens (EngineOptions).
  int micro_batches = 2;
  int micro_batch_min_tokens = 8;
  // Activation numerics of the projections and FFNs (EngineOptions::activations): a cluster-wide
  // setting; bf16 (opt-in, bf16 weights, fastest on AVX-512 BF16) needs the same value on every
  // router and expert worker.
  kernels::Activations activations = kernels::Activations::kF32;
  // Weight numerics (EngineOptions::weights; model::WeightsMode): checkpoint (as stored) or q8_0
  // (quantized on load, W8A8: kernels.h INT8 WEIGHTS). Cluster-wide like activations; part of
  // the KV block root, so blocks computed in another mode are never reused.
  model::WeightsMode weights = model::WeightsMode::kCheckpoint;
  // Also export vllm:num_requests_waiting and vllm:kv_cache_usage_perc (the names Gateway API
  // Inference Extension endpoint pickers read by default). Off: `promtool check metrics` rejects
  // the ':' in them; point the picker at moe_requests_waiting / moe_kv_usage_ratio{tier="l1"}.
  bool vllm_metric_aliases = false;
  SchedulerOptions scheduler;
  // Constrained decoding: the compiled-constraint cache and its bounds.
  grammar::GrammarCacheOptions grammar;

  static void Describe(common::config::Schema<RouterCoreOptions>& s) {
    s.Add("model_dir", &RouterCoreOptions::model_dir, "HF checkpoint directory").NonEmpty();
    s.Add("model_name", &RouterCoreOptions::model_name, "served model id; default dir name");
    s.Add("num_threads", &RouterCoreOptions::num_threads, "engine threads").Range(1, 1024);
    s.Add("kv_cache_bytes", &RouterCoreOptions::kv_cache_bytes, "L1 KV budget, bytes").Min(0);
    s.Add("kv_num_blocks", &RouterCoreOptions::kv_num_blocks, "> 0: exact L1 block count").Min(0);
    s.Add("block_size", &RouterCoreOptions::block_size, "tokens per KV block").Range(1, 1024);
    s.Add("enable_prefix_caching", &RouterCoreOptions::enable_prefix_caching,
          "reuse cached prompt prefixes");
    s.Add("micro_batches", &RouterCoreOptions::micro_batches,
          "remote experts: micro-batches per step (2 = ping-pong)")
        .Range(1, 2);
    s.Add("micro_batch_min_tokens", &RouterCoreOptions::micro_batch_min_tokens,
          "smallest step that is split")
        .Range(2, 1 << 20);
    s.AddEnum("activations", &RouterCoreOptions::activations,
              {{"f32", kernels::Activations::kF32}, {"bf16", kernels::Activations::kBf16}},
              "activation numerics, cluster-wide (bf16: opt-in, bf16 weights)");
    s.AddEnum(
        "weights", &RouterCoreOptions::weights,
        {{"checkpoint", model::WeightsMode::kCheckpoint}, {"q8_0", model::WeightsMode::kQ8_0}},
        "weight numerics, cluster-wide: as stored, or q8_0 on load (opt-in)");
    s.Add("vllm_metric_aliases", &RouterCoreOptions::vllm_metric_aliases,
          "also export vllm:num_requests_waiting, vllm:kv_cache_usage_perc (GIE)");
    s.Section("scheduler", &RouterCoreOptions::scheduler);
    s.Section("grammar", &RouterCoreOptions::grammar);
  }
  absl::Status Validate() const;
};

// Owns the parts; the scheduler loop starts with Start(). Thread-safety: as Scheduler.
class RouterCore {
 public:
  // Loads the model and builds the engine, KV pool and scheduler. `registry` and `clock` are
  // borrowed and must outlive the core. Errors: INVALID_ARGUMENT (options), the checkpoint's
  // errors (NOT_FOUND, INVALID_ARGUMENT), RESOURCE_EXHAUSTED (KV allocation).
  // `experts` (optional, borrowed, must outlive the core): where the routed experts run (the
  // RemoteExpertExecutor of a disaggregated router); the checkpoint is then opened without
  // the routed experts' tensors. Null = in-process (LocalExpertExecutor over all tensors).
  // `kv_tier` (optional, borrowed, must outlive the core): the kv-store below L1 (KvStoreClient);
  // null = none. Its fidelity is part of the KV block identity's numerics.
  static absl::StatusOr<std::unique_ptr<RouterCore>> Create(
      const RouterCoreOptions& options, common::metrics::Registry& registry, common::Clock& clock,
      engine::ExpertExecutor* experts = nullptr, KvTier* kv_tier = nullptr);
  // Shuts the scheduler down (aborting what runs) before the engine goes.
  ~RouterCore();

  Scheduler& scheduler() { return *scheduler_; }
  engine::Engine& engine() { return *engine_; }
  const model::ModelConfig& config() const { return checkpoint_->config(); }
  const std::string& model_name() const { return model_name_; }
  const model::Checkpoint& checkpoint() const { return *checkpoint_; }
  // The KV block identity's namespace (cache_salt empty): model id, checkpoint fingerprint,
  // block size, KV dtype, numerics. What GetStats publishes for the gateway.
  const kv::BlockHashRootKey& kv_namespace() const { return kv_namespace_; }
  // Compiles constraints for this model's tokenizer (model_dir/tokenizer.json); null when the
  // checkpoint has no tokenizer the router can read (constrained requests are then refused).
  grammar::GrammarCache* grammar_cache() { return grammar_cache_.get(); }

 private:
  RouterCore() = default;

  std::string model_name_;
  kv::BlockHashRootKey kv_namespace_;
  NoKvTier no_kv_tier_;
  std::unique_ptr<model::Checkpoint> checkpoint_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<EngineModelRunner> runner_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<grammar::GrammarCache> grammar_cache_;
};

}  // namespace moe::router
