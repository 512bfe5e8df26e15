#include "common/model/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/base/hash.h"
#include "common/base/status_macros.h"
#include "common/model/checkpoint_layout.h"
#include "common/model/safetensors.h"
#include "common/tokenizer/preset_tokenizer.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

namespace fs = std::filesystem;
using common::DType;
using nlohmann::json;

constexpr char kTransformersVersion[] = "4.51.3";

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Uniform in [-1, 1) from the i-th draw of stream `key` (splitmix64 sequence).
inline float Uniform(uint64_t key, uint64_t i) {
  const uint64_t x = common::SplitMix64(key + i * common::kGoldenGamma);
  return static_cast<float>((static_cast<double>(x >> 40) + 0.5) * (2.0 / 16777216.0) - 1.0);
}

// value = offset + amplitude * Uniform; a uniform with standard deviation s has amplitude
// s*sqrt(3).
struct Init {
  float offset = 0;
  float amplitude = 0;
};

Init StdInit(double std) { return {0.0f, static_cast<float>(std * std::sqrt(3.0))}; }

Init InitFor(const ModelConfig& c, const TensorSlot& s) {
  const double h = static_cast<double>(c.hidden_size);
  const double inv_sqrt_h = 1.0 / std::sqrt(h);
  switch (s.role) {
    case TensorRole::kEmbed:
      return StdInit(1.0);
    case TensorRole::kInputNorm:
    case TensorRole::kPostAttnNorm:
    case TensorRole::kFinalNorm:
      return {1.0f, 0.1f};
    // q/k norms set the attention temperature: scores have std ~ g^2 with norm weight g.
    case TensorRole::kQNorm:
    case TensorRole::kKNorm:
      return {2.0f, 0.2f};
    // Without q/k norms, q.k/sqrt(d) has std ~ (c^2) for weights of std c/sqrt(hidden).
    case TensorRole::kQProj:
    case TensorRole::kKProj:
      return StdInit((c.qk_norm ? 1.0 : 2.0) * inv_sqrt_h);
    case TensorRole::kVProj:
      return StdInit(inv_sqrt_h);
    case TensorRole::kOProj:
      return StdInit(1.0 / std::sqrt(static_cast<double>(c.q_size())));
    case TensorRole::kQBias:
    case TensorRole::kKBias:
    case TensorRole::kVBias:
    case TensorRole::kOBias:
      return StdInit(0.5);
    case TensorRole::kRouter:
      return StdInit(inv_sqrt_h);
    case TensorRole::kExpertGate:
    case TensorRole::kExpertUp:
    case TensorRole::kSharedGate:
    case TensorRole::kSharedUp:
    case TensorRole::kDenseGate:
    case TensorRole::kDenseUp:
    case TensorRole::kSharedExpertGate:
      return StdInit(inv_sqrt_h);
    case TensorRole::kExpertDown:
    case TensorRole::kSharedDown:
    case TensorRole::kDenseDown:
      return StdInit(1.0 / std::sqrt(static_cast<double>(s.shape[1])));
    case TensorRole::kLmHead:
      return StdInit(6.0 * inv_sqrt_h);
  }
  return {};
}

// Streams `slot`'s values (float) in chunks to `sink`.
class TensorGenerator {
 public:
  TensorGenerator(const MakeModelOptions& o, const ModelConfig& c, const TensorSlot& s)
      : s_(s), init_(InitFor(c, s)), key_(common::SplitMix64(o.seed ^ Fnv1a(s.name))) {
    cols_ = s.shape.size() == 2 ? s.shape[1] : s.shape[0];
    numel_ = s.shape.size() == 2 ? s.shape[0] * s.shape[1] : s.shape[0];
    if (o.gate_skew > 0) {
      skew_channel_ = c.hidden_size - 1;
      if (s.role == TensorRole::kRouter) {
        // The router's input in the constant channel after RMSNorm is about
        // K / rms(residual); residual features other than it have RMS ~ 1.4.
        const double h = static_cast<double>(c.hidden_size);
        const double k = kSkewChannelValue;
        const double xhat = k / std::sqrt((k * k + (h - 1) * 2.0) / h);
        std::vector<int64_t> ranks = GateSkewRanks(o, s.layer);
        for (int64_t rank : ranks) {
          router_skew_.push_back(-o.gate_skew * std::log(static_cast<double>(rank)) / xhat);
        }
      }
    }
  }

  int64_t numel() const { return numel_; }

  // Fills out[0, n) with elements [begin, begin + n).
  void Fill(int64_t begin, int64_t n, float* out) const {
    for (int64_t i = 0; i < n; ++i) {
      out[i] = init_.offset + init_.amplitude * Uniform(key_, static_cast<uint64_t>(begin + i));
    }
    if (skew_channel_ < 0) return;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t idx = begin + i, row = idx / cols_, col = idx % cols_;
      switch (s_.role) {
        case TensorRole::kEmbed:
          if (col == skew_channel_) out[i] = kSkewChannelValue;
          break;
        case TensorRole::kPostAttnNorm:
          if (col == skew_channel_) out[i] = 1.0f;
          break;
        case TensorRole::kOProj:
        case TensorRole::kExpertDown:
        case TensorRole::kSharedDown:
        case TensorRole::kDenseDown:
          if (row == skew_channel_) out[i] = 0.0f;
          break;
        case TensorRole::kOBias:
          if (col == skew_channel_) out[i] = 0.0f;
          break;
        // Only the router reads the channel: a constant input to attention or the FFNs would
        // give every token a shared component in later layers and bias their routers.
        case TensorRole::kQProj:
        case TensorRole::kKProj:
        case TensorRole::kVProj:
        case TensorRole::kExpertGate:
        case TensorRole::kExpertUp:
        case TensorRole::kSharedGate:
        case TensorRole::kSharedUp:
        case TensorRole::kSharedExpertGate:
        case TensorRole::kDenseGate:
        case TensorRole::kDenseUp:
        case TensorRole::kLmHead:
          if (col == skew_channel_) out[i] = 0.0f;
          break;
        case TensorRole::kRouter:
          if (col == skew_channel_) out[i] = static_cast<float>(router_skew_[row]);
          break;
        default:
          break;
      }
    }
  }

 private:
  const TensorSlot& s_;
  Init init_;
  uint64_t key_;
  int64_t cols_ = 1, numel_ = 0;
  int64_t skew_channel_ = -1;
  std::vector<double> router_skew_;
};

void Convert(const float* in, int64_t n, DType dtype, uint8_t* out) {
  if (dtype == DType::kF32) {
    std::memcpy(out, in, static_cast<size_t>(n) * 4);
    return;
  }
  auto* o = reinterpret_cast<uint16_t*>(out);
  if (dtype == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) o[i] = common::F32ToBf16(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = common::F32ToF16(in[i]);
  }
}

std::string DtypeString(DType d) {
  switch (d) {
    case DType::kF32:
      return "float32";
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kQ8_0:  // made on load, never written to a checkpoint
      break;
  }
  return "float32";
}

json TokenId(int64_t id) { return id < 0 ? json(nullptr) : json(id); }

absl::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

// The preset's tokenizer files (tokenizer.json, tokenizer_config.json; common/tokenizer).
absl::Status WriteTokenizerFiles(const MakeModelOptions& options, const ModelConfig& config,
                                 const std::string& out_dir) {
  // <unk>=0, <s>=1, </s>=2: the bos/eos ids PresetConfig writes into config.json.
  return tokenizer::WritePresetTokenizer(out_dir, config.vocab_size,
                                         std::string(ModelTypeName(options.arch)),
                                         config.max_position_embeddings);
}

}  // namespace

absl::StatusOr<Preset> ParsePreset(std::string_view name) {
  if (name == "tiny") return Preset::kTiny;
  if (name == "small") return Preset::kSmall;
  if (name == "bench") return Preset::kBench;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", std::string(name), "' (tiny, small, bench)"));
}

std::string_view PresetName(Preset preset) {
  switch (preset) {
    case Preset::kTiny:
      return "tiny";
    case Preset::kSmall:
      return "small";
    case Preset::kBench:
      return "bench";
  }
  return "?";
}

absl::Status MakeModelOptions::Validate() const {
  if (!(gate_skew >= 0) || gate_skew > 8) {
    return absl::InvalidArgumentError(absl::StrCat("gate skew must be in [0, 8], got ", gate_skew));
  }
  if (max_shard_bytes <= 0) return absl::InvalidArgumentError("max_shard_bytes must be > 0");
  if (kv_heads < 0) return absl::InvalidArgumentError("kv_heads must be >= 0");
  return absl::OkStatus();
}

ModelConfig PresetConfig(Preset preset, Arch arch, DType dtype) {
  ModelConfig c;
  c.arch = arch;
  c.architecture = std::string(ArchitectureName(arch));
  c.model_type = std::string(ModelTypeName(arch));
  c.dtype = dtype;
  struct Size {
    int64_t hidden, inter, layers, heads, kv_heads, vocab, ctx;
  };
  const Size s = preset == Preset::kTiny    ? Size{64, 128, 2, 4, 2, 512, 4096}
                 : preset == Preset::kSmall ? Size{256, 512, 4, 4, 2, 1024, 8192}
                                            : Size{1024, 2816, 8, 16, 4, 32000, 8192};
  c.vocab_size = s.vocab;
  c.hidden_size = s.hidden;
  c.num_hidden_layers = s.layers;
  c.num_attention_heads = s.heads;
  c.num_key_value_heads = s.kv_heads;
  c.head_dim = s.hidden / s.heads;
  c.max_position_embeddings = s.ctx;
  c.intermediate_size = s.inter;
  c.moe_intermediate_size = s.inter;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.tie_word_embeddings = false;
  c.bos_token_id = 1;
  c.eos_token_id = 2;
  c.eos_token_ids = {2};
  switch (arch) {
    case Arch::kMixtral:
      c.rms_norm_eps = 1e-5;
      c.rope_theta = 1e6;
      c.norm_topk_prob = true;
      break;
    case Arch::kQwen2Moe:
      c.rms_norm_eps = 1e-6;
      c.rope_theta = 10000.0;
      c.norm_topk_prob = false;
      c.attention_bias = true;
      c.shared_expert_intermediate_size = 2 * s.inter;
      break;
    case Arch::kQwen3Moe:
      c.rms_norm_eps = 1e-6;
      c.rope_theta = 10000.0;
      c.norm_topk_prob = true;
      c.qk_norm = c.qk_norm_per_head = true;
      break;
    case Arch::kOlmoe:
      c.rms_norm_eps = 1e-5;
      c.rope_theta = 10000.0;
      c.norm_topk_prob = false;
      c.qk_norm = true;
      c.pad_token_id = 0;
      break;
  }
  return c;
}

ModelConfig PresetConfig(const MakeModelOptions& options) {
  ModelConfig c = PresetConfig(options.preset, options.arch, options.dtype);
  if (options.kv_heads > 0) c.num_key_value_heads = options.kv_heads;
  return c;
}

std::string ConfigJson(const ModelConfig& c) {
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = c.model_type;
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = TokenId(c.bos_token_id);
  j["eos_token_id"] = c.eos_token_ids.size() > 1 ? json(c.eos_token_ids) : TokenId(c.eos_token_id);
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["output_router_logits"] = false;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = DtypeString(c.dtype);
  j["transformers_version"] = kTransformersVersion;
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  const bool qwen = c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe;
  if (qwen) {
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["max_window_layers"] = c.num_hidden_layers;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["num_experts"] = c.num_experts;
    j["rope_scaling"] = nullptr;
    j["router_aux_loss_coef"] = 0.001;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  }
  switch (c.arch) {
    case Arch::kMixtral:
      j["head_dim"] = c.head_dim;
      j["num_local_experts"] = c.num_experts;
      j["router_aux_loss_coef"] = 0.001;
      j["router_jitter_noise"] = 0.0;
      j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
      break;
    case Arch::kQwen2Moe:
      j["qkv_bias"] = c.attention_bias;
      j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
      break;
    case Arch::kQwen3Moe:
      j["attention_bias"] = c.attention_bias;
      j["head_dim"] = c.head_dim;
      break;
    case Arch::kOlmoe:
      j["attention_bias"] = c.attention_bias;
      j["clip_qkv"] = c.clip_qkv > 0 ? json(c.clip_qkv) : json(nullptr);
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["num_experts"] = c.num_experts;
      j["pad_token_id"] = TokenId(c.pad_token_id);
      j["rope_scaling"] = nullptr;
      j["router_aux_loss_coef"] = 0.01;
      break;
  }
  return j.dump(2) + "\n";
}

std::string GenerationConfigJson(const ModelConfig& c) {
  json j;
  j["_from_model_config"] = true;
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids.size() > 1 ? json(c.eos_token_ids) : json(c.eos_token_id);
  }
  if (c.pad_token_id >= 0) j["pad_token_id"] = c.pad_token_id;
  j["transformers_version"] = kTransformersVersion;
  return j.dump(2) + "\n";
}

std::vector<int64_t> GateSkewRanks(const MakeModelOptions& options, int64_t layer) {
  const ModelConfig c = PresetConfig(options.preset, options.arch, options.dtype);
  std::vector<int64_t> order(c.num_experts);
  std::iota(order.begin(), order.end(), 0);
  // Fisher-Yates with a stream keyed by (seed, layer).
  const uint64_t key = common::SplitMix64(options.seed ^ Fnv1a(absl::StrCat("gate_skew.", layer)));
  for (int64_t i = c.num_experts - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(common::SplitMix64(key + static_cast<uint64_t>(i)) %
                                           static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  std::vector<int64_t> rank_of(c.num_experts);
  for (int64_t r = 0; r < c.num_experts; ++r) rank_of[order[r]] = r + 1;
  return rank_of;
}

absl::Status MakeModel(const MakeModelOptions& options, const std::string& out_dir) {
  RETURN_IF_ERROR(options.Validate());
  const ModelConfig config = PresetConfig(options);
  RETURN_IF_ERROR(config.Validate());
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(out_dir, ": ", ec.message()));

  const std::vector<TensorSlot> slots = CheckpointTensors(config);
  // Plan the shards: consecutive tensors, each file at most max_shard_bytes (a larger tensor
  // gets a file of its own).
  std::vector<std::vector<size_t>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const int64_t n = TensorSpec{slots[i].name, config.dtype, slots[i].shape}.nbytes();
    if (!shards.back().empty() && shard_bytes + n > options.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(i);
    shard_bytes += n;
    total_bytes += n;
  }
  // Stale files of an earlier run with a different layout would confuse loaders.
  for (const auto& entry : fs::directory_iterator(out_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("model") &&
        (name.ends_with(".safetensors") || name == "model.safetensors.index.json")) {
      fs::remove(entry.path(), ec);
    }
  }

  constexpr int64_t kChunk = 1 << 20;
  std::vector<float> values(kChunk);
  std::vector<uint8_t> bytes(kChunk * 4);
  int64_t done = 0;
  json weight_map = json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    std::string file = "model.safetensors";
    if (shards.size() > 1) {
      char name[64];
      std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
      file = name;
    }
    std::vector<TensorSpec> specs;
    for (size_t i : shards[s]) {
      specs.push_back({slots[i].name, config.dtype, slots[i].shape});
      weight_map[slots[i].name] = file;
    }
    ASSIGN_OR_RETURN(auto writer,
                     SafetensorsWriter::Create((fs::path(out_dir) / file).string(), specs));
    for (size_t i : shards[s]) {
      TensorGenerator gen(options, config, slots[i]);
      for (int64_t begin = 0; begin < gen.numel(); begin += kChunk) {
        const int64_t n = std::min(kChunk, gen.numel() - begin);
        gen.Fill(begin, n, values.data());
        Convert(values.data(), n, config.dtype, bytes.data());
        const int64_t nb = n * common::DTypeSize(config.dtype);
        RETURN_IF_ERROR(writer->Append(bytes.data(), nb));
        done += nb;
        if (options.progress) options.progress(done, total_bytes);
      }
    }
    RETURN_IF_ERROR(writer->Finish());
  }
  if (shards.size() > 1) {
    json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
    RETURN_IF_ERROR(
        WriteText(fs::path(out_dir) / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  RETURN_IF_ERROR(WriteText(fs::path(out_dir) / "config.json", ConfigJson(config)));
  RETURN_IF_ERROR(
      WriteText(fs::path(out_dir) / "generation_config.json", GenerationConfigJson(config)));
  RETURN_IF_ERROR(WriteTokenizerFiles(options, config, out_dir));
  return absl::OkStatus();
}

}  // namespace moe::model
