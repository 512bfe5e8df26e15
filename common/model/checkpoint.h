// Opening a Hugging Face checkpoint directory: config.json plus model.safetensors or a sharded
// set (model.safetensors.index.json), memory-mapped, any subset of tensors bound into
// ModelWeights views that point into the mappings (no copies; HF layout used in place).
//
//   auto ckpt = Checkpoint::Open(dir);                                 // everything
//   auto ckpt = Checkpoint::Open(dir, LoadOptions::DenseOnly());       // a router
//   auto ckpt = Checkpoint::Open(dir, LoadOptions::OnlyExperts({{0, 3}, {1, 5}}));  // a worker
#pragma once

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/kernels/thread_pool.h"
#include "common/model/checkpoint_layout.h"
#include "common/model/model_config.h"
#include "common/model/safetensors.h"
#include "common/model/weights.h"

namespace moe::model {

struct ExpertKey {
  int64_t layer = 0;
  int64_t expert = 0;
  friend bool operator==(const ExpertKey&, const ExpertKey&) = default;
  friend auto operator<=>(const ExpertKey&, const ExpertKey&) = default;
};

struct LoadOptions {
  // Embeddings, norms, attention, router gates, shared experts, dense MLP layers, lm_head.
  bool dense = true;
  // Per-layer tensors are loaded only for these layers (empty: all layers).
  std::vector<int64_t> layers;
  // Routed experts: all of them (of the selected layers), or exactly `experts`.
  bool all_experts = true;
  std::vector<ExpertKey> experts;
  // Every tensor must have the config's torch_dtype (else only F32/BF16/F16 is required).
  bool strict_dtype = true;
  // madvise(WILLNEED) the loaded tensors so the first forward pass does not fault them in.
  bool prefetch = false;
  // kQ8_0: the projections are quantized on load into memory the Checkpoint owns (weights.h says
  // which; a tensor whose input features are not a multiple of 32 stays as stored). The mapped
  // file pages are then read once and left to the page cache.
  WeightsMode weights = WeightsMode::kCheckpoint;
  // Threads quantizing on load (kQ8_0); 0 = the machine's hardware threads.
  int quantize_threads = 0;

  static LoadOptions All() { return {}; }
  static LoadOptions DenseOnly() {
    LoadOptions o;
    o.all_experts = false;
    return o;
  }
  static LoadOptions OnlyExperts(std::vector<ExpertKey> experts) {
    LoadOptions o;
    o.dense = false;
    o.all_experts = false;
    o.experts = std::move(experts);
    return o;
  }
  // Layers and experts in range for `config`, experts only on MoE layers.
  absl::Status Validate(const ModelConfig& config) const;
};

// An open checkpoint: config, mapped files and the weight views. Immutable after Open, so it
// may be shared by threads. Views stay valid while the Checkpoint lives.
class Checkpoint {
 public:
  // Reads `dir`/config.json, maps the safetensors files holding the selected tensors (shards
  // that hold none are not opened), and binds and validates each selected tensor (present,
  // shape and dtype as the config implies). Errors name the file and the tensor.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir,
                                                          const LoadOptions& options = {});

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  // Unselected tensors have null views; `weights().layers[l].experts` has num_experts entries
  // on every MoE layer.
  const ModelWeights& weights() const { return weights_; }
  // Bytes of tensor data the bound views cover (tied lm_head counted once; a quantized tensor
  // counts its q8_0 bytes, a tied lm_head quantized apart from the embeddings counts both).
  int64_t loaded_bytes() const { return loaded_bytes_; }
  // The files mapped so far (shard name -> file).
  std::vector<std::string> mapped_files() const;

  // Views of one routed expert (mapping its shard if needed), validated like Open's; does not
  // change weights(). For an expert worker that loads experts after start-up. Thread-compatible
  // (callers serialise MapExpert calls).
  absl::StatusOr<ExpertWeights> MapExpert(int64_t layer, int64_t expert);

 private:
  Checkpoint() = default;
  absl::StatusOr<const SafetensorsFile*> FileFor(const std::string& tensor);
  absl::StatusOr<WeightView> Bind(const std::string& name, const std::vector<int64_t>& shape,
                                  bool prefetch);
  // `v` quantized to q8_0 when options_.weights says so for `role` (else `v`).
  absl::StatusOr<WeightView> MaybeQuantize(const WeightView& v, TensorRole role);

  std::string dir_;
  ModelConfig config_;
  LoadOptions options_;
  ModelWeights weights_;
  int64_t loaded_bytes_ = 0;
  // Sharded: tensor name -> shard file name (from the index). Unsharded: empty.
  std::map<std::string, std::string> weight_map_;
  std::string single_file_;  // "model.safetensors" when unsharded
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  // The q8_0 copies (WeightsMode::kQ8_0), 64-byte aligned.
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<void, FreeDeleter>> quantized_;
  std::map<const void*, WeightView> quantized_by_source_;  // source data -> its q8_0 view
  std::unique_ptr<kernels::ThreadPool> quantize_pool_;
};

}  // namespace moe::model
