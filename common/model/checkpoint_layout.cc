#include "common/model/checkpoint_layout.h"

#include "absl/strings/str_cat.h"

namespace moe::model {
namespace {

std::string LayerPrefix(int64_t layer) { return absl::StrCat("model.layers.", layer, "."); }

std::string MoePrefix(const ModelConfig& c, int64_t layer) {
  return LayerPrefix(layer) + (c.arch == Arch::kMixtral ? "block_sparse_moe." : "mlp.");
}

}  // namespace

bool QuantizedInQ8Mode(TensorRole r) {
  switch (r) {
    case TensorRole::kLmHead:
    case TensorRole::kQProj:
    case TensorRole::kKProj:
    case TensorRole::kVProj:
    case TensorRole::kOProj:
    case TensorRole::kExpertGate:
    case TensorRole::kExpertUp:
    case TensorRole::kExpertDown:
    case TensorRole::kSharedGate:
    case TensorRole::kSharedUp:
    case TensorRole::kSharedDown:
    case TensorRole::kDenseGate:
    case TensorRole::kDenseUp:
    case TensorRole::kDenseDown:
      return true;
    default:
      return false;
  }
}

std::string ExpertTensorName(const ModelConfig& c, int64_t layer, int64_t expert, TensorRole role) {
  std::string base = absl::StrCat(MoePrefix(c, layer), "experts.", expert, ".");
  const bool mixtral = c.arch == Arch::kMixtral;
  switch (role) {
    case TensorRole::kExpertGate:
      return base + (mixtral ? "w1.weight" : "gate_proj.weight");
    case TensorRole::kExpertUp:
      return base + (mixtral ? "w3.weight" : "up_proj.weight");
    case TensorRole::kExpertDown:
      return base + (mixtral ? "w2.weight" : "down_proj.weight");
    default:
      return "";
  }
}

std::vector<TensorSlot> CheckpointTensors(const ModelConfig& c) {
  std::vector<TensorSlot> out;
  const int64_t h = c.hidden_size;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorRole role, int64_t layer = -1,
                 int64_t expert = -1) {
    out.push_back(TensorSlot{std::move(name), std::move(shape), role, layer, expert});
  };
  add("model.embed_tokens.weight", {c.vocab_size, h}, TensorRole::kEmbed);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = LayerPrefix(l);
    add(p + "input_layernorm.weight", {h}, TensorRole::kInputNorm, l);
    add(p + "post_attention_layernorm.weight", {h}, TensorRole::kPostAttnNorm, l);
    const std::string a = p + "self_attn.";
    add(a + "q_proj.weight", {c.q_size(), h}, TensorRole::kQProj, l);
    add(a + "k_proj.weight", {c.kv_size(), h}, TensorRole::kKProj, l);
    add(a + "v_proj.weight", {c.kv_size(), h}, TensorRole::kVProj, l);
    add(a + "o_proj.weight", {h, c.q_size()}, TensorRole::kOProj, l);
    if (c.attention_bias) {
      add(a + "q_proj.bias", {c.q_size()}, TensorRole::kQBias, l);
      add(a + "k_proj.bias", {c.kv_size()}, TensorRole::kKBias, l);
      add(a + "v_proj.bias", {c.kv_size()}, TensorRole::kVBias, l);
    }
    if (c.o_proj_bias) add(a + "o_proj.bias", {h}, TensorRole::kOBias, l);
    if (c.qk_norm) {
      add(a + "q_norm.weight", {c.qk_norm_per_head ? c.head_dim : c.q_size()}, TensorRole::kQNorm,
          l);
      add(a + "k_norm.weight", {c.qk_norm_per_head ? c.head_dim : c.kv_size()}, TensorRole::kKNorm,
          l);
    }
    if (c.IsMoeLayer(l)) {
      const std::string m = MoePrefix(c, l);
      add(m + "gate.weight", {c.num_experts, h}, TensorRole::kRouter, l);
      const int64_t f = c.moe_intermediate_size;
      for (int64_t e = 0; e < c.num_experts; ++e) {
        add(ExpertTensorName(c, l, e, TensorRole::kExpertGate), {f, h}, TensorRole::kExpertGate, l,
            e);
        add(ExpertTensorName(c, l, e, TensorRole::kExpertUp), {f, h}, TensorRole::kExpertUp, l, e);
        add(ExpertTensorName(c, l, e, TensorRole::kExpertDown), {h, f}, TensorRole::kExpertDown, l,
            e);
      }
      if (c.shared_expert_intermediate_size > 0) {
        const int64_t s = c.shared_expert_intermediate_size;
        add(m + "shared_expert.gate_proj.weight", {s, h}, TensorRole::kSharedGate, l);
        add(m + "shared_expert.up_proj.weight", {s, h}, TensorRole::kSharedUp, l);
        add(m + "shared_expert.down_proj.weight", {h, s}, TensorRole::kSharedDown, l);
        add(m + "shared_expert_gate.weight", {1, h}, TensorRole::kSharedExpertGate, l);
      }
    } else {
      const int64_t f = c.intermediate_size;
      add(p + "mlp.gate_proj.weight", {f, h}, TensorRole::kDenseGate, l);
      add(p + "mlp.up_proj.weight", {f, h}, TensorRole::kDenseUp, l);
      add(p + "mlp.down_proj.weight", {h, f}, TensorRole::kDenseDown, l);
    }
  }
  add("model.norm.weight", {h}, TensorRole::kFinalNorm);
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h}, TensorRole::kLmHead);
  return out;
}

WeightView* SlotView(ExpertWeights& e, TensorRole role) {
  switch (role) {
    case TensorRole::kExpertGate:
    case TensorRole::kSharedGate:
    case TensorRole::kDenseGate:
      return &e.gate;
    case TensorRole::kExpertUp:
    case TensorRole::kSharedUp:
    case TensorRole::kDenseUp:
      return &e.up;
    case TensorRole::kExpertDown:
    case TensorRole::kSharedDown:
    case TensorRole::kDenseDown:
      return &e.down;
    default:
      return nullptr;
  }
}

WeightView* SlotView(ModelWeights& w, const TensorSlot& s) {
  switch (s.role) {
    case TensorRole::kEmbed:
      return &w.embed_tokens;
    case TensorRole::kFinalNorm:
      return &w.final_norm;
    case TensorRole::kLmHead:
      return &w.lm_head;
    default:
      break;
  }
  if (s.layer < 0 || s.layer >= static_cast<int64_t>(w.layers.size())) return nullptr;
  LayerWeights& L = w.layers[s.layer];
  switch (s.role) {
    case TensorRole::kInputNorm:
      return &L.input_norm;
    case TensorRole::kPostAttnNorm:
      return &L.post_attn_norm;
    case TensorRole::kQProj:
      return &L.q_proj;
    case TensorRole::kKProj:
      return &L.k_proj;
    case TensorRole::kVProj:
      return &L.v_proj;
    case TensorRole::kOProj:
      return &L.o_proj;
    case TensorRole::kQBias:
      return &L.q_bias;
    case TensorRole::kKBias:
      return &L.k_bias;
    case TensorRole::kVBias:
      return &L.v_bias;
    case TensorRole::kOBias:
      return &L.o_bias;
    case TensorRole::kQNorm:
      return &L.q_norm;
    case TensorRole::kKNorm:
      return &L.k_norm;
    case TensorRole::kRouter:
      return &L.router;
    case TensorRole::kExpertGate:
    case TensorRole::kExpertUp:
    case TensorRole::kExpertDown:
      if (s.expert < 0 || s.expert >= static_cast<int64_t>(L.experts.size())) return nullptr;
      return SlotView(L.experts[s.expert], s.role);
    case TensorRole::kSharedGate:
    case TensorRole::kSharedUp:
    case TensorRole::kSharedDown:
      return SlotView(L.shared_expert, s.role);
    case TensorRole::kSharedExpertGate:
      return &L.shared_expert_gate;
    case TensorRole::kDenseGate:
    case TensorRole::kDenseUp:
    case TensorRole::kDenseDown:
      return SlotView(L.dense_mlp, s.role);
    default:
      return nullptr;
  }
}

}  // namespace moe::model
