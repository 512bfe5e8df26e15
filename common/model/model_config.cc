#include "common/model/model_config.h"

#include <cmath>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/file.h"
#include "common/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

using nlohmann::json;

struct ArchNames {
  Arch arch;
  std::string_view architecture;
  std::string_view model_type;
};
constexpr ArchNames kArchNames[] = {
    {Arch::kMixtral, "MixtralForCausalLM", "mixtral"},
    {Arch::kQwen2Moe, "Qwen2MoeForCausalLM", "qwen2_moe"},
    {Arch::kQwen3Moe, "Qwen3MoeForCausalLM", "qwen3_moe"},
    {Arch::kOlmoe, "OlmoeForCausalLM", "olmoe"},
};

// Typed access to config.json fields with the HF class default when the key is absent or null.
class Fields {
 public:
  Fields(const json& j, std::string_view source) : j_(j), source_(source) {}

  absl::Status Error(std::string_view key, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": field '", std::string(key), "' ", std::string(what)));
  }
  bool IsNull(std::string_view key) const {
    auto it = j_.find(key);
    return it != j_.end() && it->is_null();
  }
  bool Present(std::string_view key) const {
    auto it = j_.find(key);
    return it != j_.end() && !it->is_null();
  }
  absl::StatusOr<int64_t> Int(std::string_view key, int64_t def) const {
    if (!Present(key)) return def;
    const json& v = j_.at(std::string(key));
    if (v.is_number_integer()) return v.get<int64_t>();
    // A float with an integral value (2.0e3) is accepted; converting one outside int64's range
    // would be undefined behaviour (found by fuzz/model_config_fuzzer), so it is refused first.
    if (v.is_number_float()) {
      const double d = v.get<double>();
      if (std::isfinite(d) && d == std::trunc(d) && d >= -9.0e18 && d <= 9.0e18) {
        return static_cast<int64_t>(d);
      }
    }
    return Error(key, absl::StrCat("must be an integer, got ", v.dump()));
  }
  absl::StatusOr<double> Double(std::string_view key, double def) const {
    if (!Present(key)) return def;
    const json& v = j_.at(std::string(key));
    if (!v.is_number()) return Error(key, absl::StrCat("must be a number, got ", v.dump()));
    return v.get<double>();
  }
  absl::StatusOr<bool> Bool(std::string_view key, bool def) const {
    if (!Present(key)) return def;
    const json& v = j_.at(std::string(key));
    if (!v.is_boolean()) return Error(key, absl::StrCat("must be true/false, got ", v.dump()));
    return v.get<bool>();
  }
  absl::StatusOr<std::string> String(std::string_view key, std::string_view def) const {
    if (!Present(key)) return std::string(def);
    const json& v = j_.at(std::string(key));
    if (!v.is_string()) return Error(key, absl::StrCat("must be a string, got ", v.dump()));
    return v.get<std::string>();
  }
  // An int or a list of ints (eos_token_id); empty when absent.
  absl::StatusOr<std::vector<int64_t>> IntOrList(std::string_view key) const {
    std::vector<int64_t> out;
    if (!Present(key)) return out;
    const json& v = j_.at(std::string(key));
    if (v.is_number_integer()) {
      out.push_back(v.get<int64_t>());
      return out;
    }
    if (!v.is_array()) return Error(key, "must be an integer or a list of integers");
    for (const json& e : v) {
      if (!e.is_number_integer()) return Error(key, "must be an integer or a list of integers");
      out.push_back(e.get<int64_t>());
    }
    return out;
  }
  const json& raw() const { return j_; }

 private:
  const json& j_;
  std::string source_;
};

// Class defaults that differ between the four HF configuration classes.
struct ClassDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads;  // -1: same as num_attention_heads (Mixtral/OLMoE `None`)
  int64_t max_position_embeddings;
  double rms_norm_eps, rope_theta;
  int64_t num_experts, num_experts_per_tok, moe_intermediate_size;
  bool norm_topk_prob;
  int64_t bos_token_id, eos_token_id, pad_token_id;  // -1: None
};

ClassDefaults DefaultsFor(Arch arch) {
  switch (arch) {
    case Arch::kMixtral:  // MixtralConfig
      return {32000, 4096, 14336, 32, 32, 8, 4096 * 32, 1e-5, 1e6, 8, 2, -1, true, 1, 2, -1};
    case Arch::kQwen2Moe:  // Qwen2MoeConfig
      return {151936, 2048, 5632, 24, 16, 16, 32768, 1e-6, 10000.0, 60, 4, 1408, false, -1, -1, -1};
    case Arch::kQwen3Moe:  // Qwen3MoeConfig
      return {151936, 2048, 6144, 24, 32, 4, 32768, 1e-6, 10000.0, 128, 8, 768, false, -1, -1, -1};
    case Arch::kOlmoe:  // OlmoeConfig
      return {50304, 2048, 2048, 16, 16, -1, 4096, 1e-5, 10000.0, 64, 8, -1, false, -1, 50279, 1};
  }
  return {};
}

absl::StatusOr<common::DType> ParseTorchDtype(const Fields& f) {
  std::string key = f.Present("torch_dtype") ? "torch_dtype" : "dtype";
  ASSIGN_OR_RETURN(std::string name, f.String(key, "float32"));
  if (name == "float32" || name == "torch.float32") return common::DType::kF32;
  if (name == "bfloat16" || name == "torch.bfloat16") return common::DType::kBF16;
  if (name == "float16" || name == "torch.float16") return common::DType::kF16;
  return f.Error(key, absl::StrCat("'", name, "' is not one of float32, bfloat16, float16"));
}

// rope_scaling (v4) / rope_parameters (v5): only the default (unscaled) rope is supported.
absl::Status ParseRope(const Fields& f, double* rope_theta) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!f.Present(key)) continue;
    const json& r = f.raw().at(key);
    if (!r.is_object()) return f.Error(key, "must be an object");
    std::string type = "default";
    if (r.contains("rope_type") && r["rope_type"].is_string()) {
      type = r["rope_type"].get<std::string>();
    } else if (r.contains("type") && r["type"].is_string()) {
      type = r["type"].get<std::string>();
    }
    if (type != "default") {
      return absl::UnimplementedError(
          absl::StrCat("config.json: rope scaling type '", type, "' is not supported"));
    }
    if (r.contains("rope_theta") && r["rope_theta"].is_number()) {
      *rope_theta = r["rope_theta"].get<double>();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Arch> ArchFromArchitecture(std::string_view architecture) {
  for (const auto& n : kArchNames) {
    if (n.architecture == architecture) return n.arch;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown architecture '", std::string(architecture),
                   "' (supported: MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, "
                   "OlmoeForCausalLM)"));
}

absl::StatusOr<Arch> ArchFromModelType(std::string_view model_type) {
  for (const auto& n : kArchNames) {
    if (n.model_type == model_type) return n.arch;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model_type '", std::string(model_type),
                   "' (supported: mixtral, qwen2_moe, qwen3_moe, olmoe)"));
}

std::string_view ArchitectureName(Arch arch) {
  for (const auto& n : kArchNames) {
    if (n.arch == arch) return n.architecture;
  }
  return "?";
}

std::string_view ModelTypeName(Arch arch) {
  for (const auto& n : kArchNames) {
    if (n.arch == arch) return n.model_type;
  }
  return "?";
}

absl::Status ModelConfig::Validate() const {
  auto positive = [](std::string_view name, int64_t v) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("config: ", std::string(name), " must be > 0, got ", v));
  };
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(positive("num_hidden_layers", num_hidden_layers));
  RETURN_IF_ERROR(positive("num_attention_heads", num_attention_heads));
  RETURN_IF_ERROR(positive("num_key_value_heads", num_key_value_heads));
  RETURN_IF_ERROR(positive("head_dim", head_dim));
  RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  if (num_attention_heads % num_key_value_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: num_attention_heads (", num_attention_heads,
                     ") must be a multiple of num_key_value_heads (", num_key_value_heads, ")"));
  }
  if (head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: head_dim must be even, got ", head_dim));
  }
  if (!(rms_norm_eps > 0) || !(rope_theta > 0)) {
    return absl::InvalidArgumentError("config: rms_norm_eps and rope_theta must be > 0");
  }
  bool any_moe = false, any_dense = false;
  for (int64_t l = 0; l < num_hidden_layers; ++l) (IsMoeLayer(l) ? any_moe : any_dense) = true;
  if (any_moe) {
    RETURN_IF_ERROR(positive("moe_intermediate_size", moe_intermediate_size));
    RETURN_IF_ERROR(positive("num_experts_per_tok", num_experts_per_tok));
    if (num_experts_per_tok > num_experts) {
      return absl::InvalidArgumentError(
          absl::StrCat("config: num_experts_per_tok (", num_experts_per_tok,
                       ") exceeds the number of experts (", num_experts, ")"));
    }
  }
  if (any_dense) RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  if (shared_expert_intermediate_size < 0) {
    return absl::InvalidArgumentError("config: shared_expert_intermediate_size must be >= 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view json_text, std::string_view source) {
  json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": not a JSON object"));
  }
  Fields f(j, source);
  ModelConfig c;

  // The architecture: `architectures[0]`, else model_type.
  if (f.Present("architectures")) {
    const json& a = j["architectures"];
    if (!a.is_array() || a.empty() || !a[0].is_string()) {
      return f.Error("architectures", "must be a non-empty list of strings");
    }
    auto arch = ArchFromArchitecture(a[0].get<std::string>());
    if (!arch.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(source), ": ", arch.status().message()));
    c.arch = *arch;
  } else if (f.Present("model_type")) {
    ASSIGN_OR_RETURN(std::string mt, f.String("model_type", ""));
    auto arch = ArchFromModelType(mt);
    if (!arch.ok())
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(source), ": ", arch.status().message()));
    c.arch = *arch;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(std::string(source), ": neither 'architectures' nor 'model_type' is set"));
  }
  c.architecture = std::string(ArchitectureName(c.arch));
  c.model_type = std::string(ModelTypeName(c.arch));
  if (f.Present("model_type")) {
    ASSIGN_OR_RETURN(std::string mt, f.String("model_type", ""));
    if (mt != c.model_type) {
      return f.Error("model_type",
                     absl::StrCat("'", mt, "' does not match architecture ", c.architecture));
    }
  }
  const ClassDefaults d = DefaultsFor(c.arch);

  ASSIGN_OR_RETURN(c.dtype, ParseTorchDtype(f));
  ASSIGN_OR_RETURN(c.vocab_size, f.Int("vocab_size", d.vocab_size));
  ASSIGN_OR_RETURN(c.hidden_size, f.Int("hidden_size", d.hidden_size));
  ASSIGN_OR_RETURN(c.intermediate_size, f.Int("intermediate_size", d.intermediate_size));
  ASSIGN_OR_RETURN(c.num_hidden_layers, f.Int("num_hidden_layers", d.num_hidden_layers));
  ASSIGN_OR_RETURN(c.num_attention_heads, f.Int("num_attention_heads", d.num_attention_heads));
  ASSIGN_OR_RETURN(
      c.num_key_value_heads,
      f.Int("num_key_value_heads", d.num_key_value_heads < 0 || f.IsNull("num_key_value_heads")
                                       ? c.num_attention_heads
                                       : d.num_key_value_heads));
  ASSIGN_OR_RETURN(c.max_position_embeddings,
                   f.Int("max_position_embeddings", d.max_position_embeddings));
  ASSIGN_OR_RETURN(c.rms_norm_eps, f.Double("rms_norm_eps", d.rms_norm_eps));
  ASSIGN_OR_RETURN(c.rope_theta, f.Double("rope_theta", d.rope_theta));
  RETURN_IF_ERROR(ParseRope(f, &c.rope_theta));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(std::string act, f.String("hidden_act", "silu"));
  if (act != "silu")
    return f.Error("hidden_act", absl::StrCat("'", act, "' is not supported (silu)"));
  if (c.num_attention_heads <= 0) return f.Error("num_attention_heads", "must be > 0");

  // head_dim: OLMoE always hidden/heads; the others take config.head_dim when set.
  const int64_t derived_head_dim = c.hidden_size / c.num_attention_heads;
  if (c.arch == Arch::kOlmoe) {
    c.head_dim = derived_head_dim;
    if (c.head_dim * c.num_attention_heads != c.hidden_size) {
      return f.Error("hidden_size", "must be divisible by num_attention_heads (OLMoE)");
    }
  } else {
    ASSIGN_OR_RETURN(c.head_dim, f.Int("head_dim", derived_head_dim));
    if (c.head_dim == 0) c.head_dim = derived_head_dim;  // Mixtral: `head_dim or hidden/heads`
  }

  // Attention variants.
  switch (c.arch) {
    case Arch::kMixtral: {
      ASSIGN_OR_RETURN(c.sliding_window, f.Int("sliding_window", 0));
      break;
    }
    case Arch::kQwen2Moe: {
      ASSIGN_OR_RETURN(c.attention_bias, f.Bool("qkv_bias", true));
      break;
    }
    case Arch::kQwen3Moe: {
      ASSIGN_OR_RETURN(bool bias, f.Bool("attention_bias", false));
      c.attention_bias = c.o_proj_bias = bias;
      c.qk_norm = c.qk_norm_per_head = true;
      break;
    }
    case Arch::kOlmoe: {
      ASSIGN_OR_RETURN(bool bias, f.Bool("attention_bias", false));
      c.attention_bias = c.o_proj_bias = bias;
      c.qk_norm = true;
      c.qk_norm_per_head = false;
      ASSIGN_OR_RETURN(c.clip_qkv, f.Double("clip_qkv", 0));
      break;
    }
  }
  if (c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    ASSIGN_OR_RETURN(bool sliding, f.Bool("use_sliding_window", false));
    if (sliding) {
      return absl::UnimplementedError(
          absl::StrCat(std::string(source), ": use_sliding_window=true is not supported"));
    }
  }

  // Experts.
  if (c.arch == Arch::kMixtral) {
    ASSIGN_OR_RETURN(c.num_experts, f.Int("num_local_experts", d.num_experts));
  } else {
    ASSIGN_OR_RETURN(c.num_experts, f.Int("num_experts", d.num_experts));
  }
  ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int("num_experts_per_tok", d.num_experts_per_tok));
  if (c.arch == Arch::kMixtral || c.arch == Arch::kOlmoe) {
    c.moe_intermediate_size = c.intermediate_size;
  } else {
    ASSIGN_OR_RETURN(c.moe_intermediate_size,
                     f.Int("moe_intermediate_size", d.moe_intermediate_size));
  }
  if (c.arch == Arch::kMixtral) {
    c.norm_topk_prob = true;
  } else {
    ASSIGN_OR_RETURN(c.norm_topk_prob, f.Bool("norm_topk_prob", d.norm_topk_prob));
  }
  if (c.arch == Arch::kQwen2Moe) {
    ASSIGN_OR_RETURN(c.shared_expert_intermediate_size,
                     f.Int("shared_expert_intermediate_size", 5632));
  }
  if (c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    ASSIGN_OR_RETURN(c.decoder_sparse_step, f.Int("decoder_sparse_step", 1));
    if (f.Present("mlp_only_layers")) {
      const json& m = j["mlp_only_layers"];
      if (!m.is_array()) return f.Error("mlp_only_layers", "must be a list of layer indices");
      for (const json& e : m) {
        if (!e.is_number_integer()) return f.Error("mlp_only_layers", "must hold integers");
        c.mlp_only_layers.push_back(e.get<int64_t>());
      }
    }
  }

  // Special tokens.
  // An explicit null means None (no token), unlike an absent key (the class default).
  ASSIGN_OR_RETURN(c.bos_token_id,
                   f.Int("bos_token_id", f.IsNull("bos_token_id") ? -1 : d.bos_token_id));
  if (j.contains("eos_token_id")) {
    ASSIGN_OR_RETURN(c.eos_token_ids, f.IntOrList("eos_token_id"));
  } else if (d.eos_token_id >= 0) {
    c.eos_token_ids = {d.eos_token_id};
  }
  c.eos_token_id = c.eos_token_ids.empty() ? -1 : c.eos_token_ids[0];
  ASSIGN_OR_RETURN(c.pad_token_id,
                   f.Int("pad_token_id", f.IsNull("pad_token_id") ? -1 : d.pad_token_id));

  absl::Status valid = c.Validate();
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(std::string(source), ": ", valid.message()));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  ASSIGN_OR_RETURN(const std::string text, common::ReadFile(p.string()));
  return ParseModelConfig(text, p.string());
}

}  // namespace moe::model
