#include "services/router/core/router_core.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "common/base/status_macros.h"
#include "common/kv/block_manager.h"
#include "common/model/checkpoint_fingerprint.h"
#include "common/tokenizer/tokenizer.h"

namespace moe::router {

absl::Status RouterCoreOptions::Validate() const {
  RETURN_IF_ERROR(common::config::CheckFields(*this));
  if (kv_num_blocks == 0 && kv_cache_bytes == 0) {
    return absl::InvalidArgumentError("kv_cache_bytes: must be > 0 when kv_num_blocks is 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RouterCore>> RouterCore::Create(const RouterCoreOptions& options,
                                                               common::metrics::Registry& registry,
                                                               common::Clock& clock,
                                                               engine::ExpertExecutor* experts,
                                                               KvTier* kv_tier) {
  RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<RouterCore> core(new RouterCore());
  core->model_name_ = options.model_name;
  if (core->model_name_.empty()) {
    core->model_name_ =
        std::filesystem::path(options.model_dir).lexically_normal().filename().string();
    if (core->model_name_.empty()) {
      core->model_name_ = std::filesystem::path(options.model_dir).parent_path().filename();
    }
  }
  // In-process experts need every tensor; remote ones leave the routed experts to the workers.
  ASSIGN_OR_RETURN(core->checkpoint_, model::Checkpoint::Open(options.model_dir, [&] {
                     model::LoadOptions load = experts != nullptr ? model::LoadOptions::DenseOnly()
                                                                  : model::LoadOptions::All();
                     load.weights = options.weights;
                     return load;
                   }()));
  const model::ModelConfig& config = core->checkpoint_->config();

  engine::EngineOptions engine_options;
  engine_options.num_threads = options.num_threads;
  engine_options.kv_cache_bytes = options.kv_cache_bytes;
  engine_options.kv_num_blocks = options.kv_num_blocks;
  engine_options.block_size = options.block_size;
  engine_options.max_batch_tokens = options.scheduler.max_batch_tokens;
  engine_options.micro_batches = options.micro_batches;
  engine_options.micro_batch_min_tokens = options.micro_batch_min_tokens;
  engine_options.activations = options.activations;
  engine_options.weights = options.weights;
  ASSIGN_OR_RETURN(core->engine_, engine::Engine::Create(config, core->checkpoint_->weights(),
                                                         engine_options, experts));
  core->runner_ = std::make_unique<EngineModelRunner>(core->engine_.get());

  KvTier& tier = kv_tier != nullptr ? *kv_tier : core->no_kv_tier_;
  // Blocks outlive this process in the kv-store: the root names exactly what computed them.
  ASSIGN_OR_RETURN(const std::string fingerprint, model::CheckpointFingerprint(options.model_dir));
  kv::BlockManagerOptions kv_options;
  kv_options.block_size = options.block_size;
  kv_options.num_blocks = core->engine_->kv_cache().num_blocks();
  kv_options.enable_prefix_caching = options.enable_prefix_caching;
  kv_options.model_id = core->model_name_;
  kv_options.kv_dtype = common::DType::kF32;  // the engine keeps K/V in f32
  kv_options.checkpoint_fingerprint = fingerprint;
  kv_options.numerics =
      kv::NumericsSetting(kernels::ActivationsName(options.activations), tier.fidelity(),
                          model::WeightsModeName(options.weights));
  core->kv_namespace_ =
      kv::BlockHashRootKey{kv_options.model_id, kv_options.block_size, kv_options.kv_dtype, ""};
  core->kv_namespace_.checkpoint_fingerprint = kv_options.checkpoint_fingerprint;
  core->kv_namespace_.numerics = kv_options.numerics;
  ASSIGN_OR_RETURN(auto block_manager, kv::BlockManager::Create(kv_options));

  SchedulerOptions scheduler_options = options.scheduler;
  if (scheduler_options.eos_token_ids.empty()) {
    for (int64_t id : config.eos_token_ids) {
      scheduler_options.eos_token_ids.push_back(static_cast<int32_t>(id));
    }
    if (scheduler_options.eos_token_ids.empty() && config.eos_token_id >= 0) {
      scheduler_options.eos_token_ids.push_back(static_cast<int32_t>(config.eos_token_id));
    }
  }
  // Constrained decoding needs the token bytes: the checkpoint's tokenizer, read once.
  if (auto tok = tokenizer::Tokenizer::FromFile(options.model_dir); tok.ok()) {
    ASSIGN_OR_RETURN(auto vocabulary,
                     grammar::TokenVocabulary::FromTokenizer(**tok, config.vocab_size,
                                                             scheduler_options.eos_token_ids));
    core->grammar_cache_ = std::make_unique<grammar::GrammarCache>(
        options.grammar, std::move(vocabulary), registry, clock);
  } else {
    MOE_LOG_WARN("router: no tokenizer in {} ({}): constrained decoding is off", options.model_dir,
                 tok.status().ToString());
  }
  core->metrics_ =
      std::make_unique<RouterMetrics>(registry, core->model_name_, options.vllm_metric_aliases);
  ASSIGN_OR_RETURN(core->scheduler_,
                   Scheduler::Create(scheduler_options, std::move(block_manager), *core->runner_,
                                     tier, clock, *core->metrics_));
  return core;
}

RouterCore::~RouterCore() {
  if (scheduler_ != nullptr) scheduler_->Shutdown(absl::InfinitePast());
}

}  // namespace moe::router
