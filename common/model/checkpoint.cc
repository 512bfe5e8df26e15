#include "common/model/checkpoint.h"

#include <sys/mman.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/file.h"
#include "common/base/status_macros.h"
#include "common/model/checkpoint_layout.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr char kSingleFile[] = "model.safetensors";
constexpr char kIndexFile[] = "model.safetensors.index.json";

std::string ShapeStr(const std::vector<int64_t>& s) {
  return absl::StrCat("[", absl::StrJoin(s, ", "), "]");
}

absl::StatusOr<std::map<std::string, std::string>> ReadIndex(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string text, common::ReadFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": missing object 'weight_map'"));
  }
  std::map<std::string, std::string> out;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": weight_map entry for tensor '", it.key(), "' is not a file name"));
    }
    std::string file = it.value().get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": weight_map entry for tensor '",
                                                     it.key(), "' names a bad file '", file, "'"));
    }
    out[it.key()] = std::move(file);
  }
  return out;
}

}  // namespace

absl::Status LoadOptions::Validate(const ModelConfig& c) const {
  for (int64_t l : layers) {
    if (l < 0 || l >= c.num_hidden_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadOptions: layer ", l, " out of range [0, ", c.num_hidden_layers, ")"));
    }
  }
  for (const ExpertKey& k : experts) {
    if (k.layer < 0 || k.layer >= c.num_hidden_layers || !c.IsMoeLayer(k.layer)) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadOptions: layer ", k.layer, " is not an MoE layer of this model"));
    }
    if (k.expert < 0 || k.expert >= c.num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("LoadOptions: expert ", k.expert, " out of range [0, ", c.num_experts, ")"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> Checkpoint::mapped_files() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : files_) out.push_back(name);
  return out;
}

absl::StatusOr<const SafetensorsFile*> Checkpoint::FileFor(const std::string& tensor) {
  std::string file = single_file_;
  if (file.empty()) {
    auto it = weight_map_.find(tensor);
    if (it == weight_map_.end()) {
      return absl::NotFoundError(absl::StrCat((fs::path(dir_) / kIndexFile).string(),
                                              ": missing tensor '", tensor, "' in weight_map"));
    }
    file = it->second;
  }
  auto it = files_.find(file);
  if (it == files_.end()) {
    ASSIGN_OR_RETURN(auto opened, SafetensorsFile::Open((fs::path(dir_) / file).string()));
    it = files_.emplace(file, std::move(opened)).first;
  }
  return it->second.get();
}

absl::StatusOr<WeightView> Checkpoint::Bind(const std::string& name,
                                            const std::vector<int64_t>& shape, bool prefetch) {
  ASSIGN_OR_RETURN(const SafetensorsFile* file, FileFor(name));
  const TensorInfo* t = file->Find(name);
  if (t == nullptr) {
    return absl::NotFoundError(absl::StrCat(file->path(), ": missing tensor '", name, "'"));
  }
  if (!t->dtype_supported) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": tensor '", name, "': dtype ",
                                                   t->dtype_name,
                                                   " is not supported (F32, BF16, F16)"));
  }
  if (options_.strict_dtype && t->dtype != config_.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": tensor '", name, "': dtype ", t->dtype_name, ", expected ",
        std::string(SafetensorsDtypeName(config_.dtype)), " (config.json torch_dtype)"));
  }
  if (t->shape != shape) {
    return absl::InvalidArgumentError(absl::StrCat(file->path(), ": tensor '", name, "': shape ",
                                                   t->ShapeString(), ", expected ", ShapeStr(shape),
                                                   " from config.json"));
  }
  if (prefetch) file->Prefetch(*t);
  WeightView v;
  v.data = t->data;
  v.dtype = t->dtype;
  v.rows = shape.size() == 2 ? shape[0] : 1;
  v.cols = shape.size() == 2 ? shape[1] : shape[0];
  return v;
}

absl::StatusOr<WeightView> Checkpoint::MaybeQuantize(const WeightView& v, TensorRole role) {
  if (options_.weights != WeightsMode::kQ8_0 || !QuantizedInQ8Mode(role) ||
      v.cols % common::kQ8BlockSize != 0 || v.data == nullptr) {
    return v;
  }
  // One copy per source tensor: an expert mapped again (a worker's unload then load) reuses it.
  if (auto it = quantized_by_source_.find(v.data); it != quantized_by_source_.end()) {
    return it->second;
  }
  const size_t bytes = static_cast<size_t>(v.rows * common::RowBytes(common::DType::kQ8_0, v.cols));
  // 2 MiB-aligned and MADV_HUGEPAGE when at least that big: transparent huge pages, one TLB entry
  // per 2 MiB of weights (advice; without THP these are ordinary pages).
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t align = bytes >= kHuge ? kHuge : 64;
  const size_t alloc = (bytes + align - 1) / align * align;
  void* dst = std::aligned_alloc(align, alloc);
  if (dst != nullptr && align == kHuge) ::madvise(dst, alloc, MADV_HUGEPAGE);
  if (dst == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(dir_, ": no memory for ", bytes, " bytes of q8_0 weights"));
  }
  quantized_.emplace_back(dst);
  if (quantize_pool_ == nullptr) {
    const int threads = options_.quantize_threads > 0
                            ? options_.quantize_threads
                            : std::max(1u, std::thread::hardware_concurrency());
    quantize_pool_ = std::make_unique<kernels::ThreadPool>(threads);
  }
  RETURN_IF_ERROR(
      kernels::QuantizeRowsQ8_0(v.data, v.dtype, v.rows, v.cols, dst, quantize_pool_.get()));
  WeightView q = v;
  q.data = dst;
  q.dtype = common::DType::kQ8_0;
  quantized_by_source_.emplace(v.data, q);
  return q;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir,
                                                             const LoadOptions& options) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  ck->options_ = options;
  ASSIGN_OR_RETURN(ck->config_, LoadModelConfig((fs::path(dir) / "config.json").string()));
  const ModelConfig& c = ck->config_;
  RETURN_IF_ERROR(options.Validate(c));

  std::error_code ec;
  if (fs::exists(fs::path(dir) / kSingleFile, ec)) {
    ck->single_file_ = kSingleFile;
  } else if (fs::exists(fs::path(dir) / kIndexFile, ec)) {
    ASSIGN_OR_RETURN(ck->weight_map_, ReadIndex((fs::path(dir) / kIndexFile).string()));
  } else {
    return absl::NotFoundError(
        absl::StrCat(dir, ": no ", kSingleFile, " or ", kIndexFile, " in the checkpoint"));
  }

  ModelWeights& w = ck->weights_;
  w.layers.resize(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (c.IsMoeLayer(l)) w.layers[l].experts.resize(c.num_experts);
  }
  std::set<int64_t> layers(options.layers.begin(), options.layers.end());
  std::set<ExpertKey> experts(options.experts.begin(), options.experts.end());
  auto layer_selected = [&](int64_t l) { return layers.empty() || layers.count(l) > 0; };

  for (const TensorSlot& s : CheckpointTensors(c)) {
    bool want;
    if (IsExpertRole(s.role)) {
      want = options.all_experts ? layer_selected(s.layer) : experts.count({s.layer, s.expert}) > 0;
    } else {
      want = options.dense && (s.layer < 0 || layer_selected(s.layer));
    }
    if (!want) continue;
    ASSIGN_OR_RETURN(WeightView v, ck->Bind(s.name, s.shape, options.prefetch));
    ASSIGN_OR_RETURN(v, ck->MaybeQuantize(v, s.role));
    *SlotView(w, s) = v;
    ck->loaded_bytes_ += v.rows * common::RowBytes(v.dtype, v.cols);
  }
  if (c.tie_word_embeddings && options.dense) {
    ASSIGN_OR_RETURN(w.lm_head, ck->MaybeQuantize(w.embed_tokens, TensorRole::kLmHead));
    if (w.lm_head.data != w.embed_tokens.data) {
      ck->loaded_bytes_ += w.lm_head.rows * common::RowBytes(w.lm_head.dtype, w.lm_head.cols);
    }
  }
  ck->quantize_pool_.reset();  // MapExpert makes another when it needs one
  return ck;
}

absl::StatusOr<ExpertWeights> Checkpoint::MapExpert(int64_t layer, int64_t expert) {
  LoadOptions probe = LoadOptions::OnlyExperts({{layer, expert}});
  RETURN_IF_ERROR(probe.Validate(config_));
  ExpertWeights e;
  const int64_t h = config_.hidden_size, f = config_.moe_intermediate_size;
  for (TensorRole role :
       {TensorRole::kExpertGate, TensorRole::kExpertUp, TensorRole::kExpertDown}) {
    std::vector<int64_t> shape =
        role == TensorRole::kExpertDown ? std::vector<int64_t>{h, f} : std::vector<int64_t>{f, h};
    ASSIGN_OR_RETURN(WeightView v, Bind(ExpertTensorName(config_, layer, expert, role), shape,
                                        options_.prefetch));
    ASSIGN_OR_RETURN(*SlotView(e, role), MaybeQuantize(v, role));
  }
  quantize_pool_.reset();
  return e;
}

}  // namespace moe::model
