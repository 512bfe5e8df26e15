#include "common/model/gguf_export.h"

#include <cstring>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/model/checkpoint.h"
#include "common/model/gguf_writer.h"
#include "common/tensor/dtype.h"
#include "nlohmann/json.hpp"

namespace moe::model::gguf {
namespace {

using common::DType;

GgmlType TypeOf(DType d) { return d == DType::kBF16 ? GgmlType::kBF16 : GgmlType::kF32; }

// Copies a view as stored (row-major [rows, cols] -> ne {cols, rows}).
TensorFill CopyView(WeightView v) {
  return [v](uint8_t* out) {
    std::memcpy(out, v.data, static_cast<size_t>(v.rows * v.cols * common::DTypeSize(v.dtype)));
    return absl::OkStatus();
  };
}

// A view widened to F32 (norms, router gate): exact for BF16.
TensorFill ToF32(WeightView v) {
  return [v](uint8_t* out) {
    const int64_t n = v.rows * v.cols;
    float* o = reinterpret_cast<float*>(out);
    if (v.dtype == DType::kF32) {
      std::memcpy(o, v.data, static_cast<size_t>(n) * 4);
    } else {
      const uint16_t* s = static_cast<const uint16_t*>(v.data);
      for (int64_t i = 0; i < n; ++i) o[i] = common::Bf16ToF32(s[i]);
    }
    return absl::OkStatus();
  };
}

// q/k rows from HF's rotate-half layout (per head: the first halves of the rotary pairs, then the
// second halves) to llama.cpp's interleaved pairs: new row h*d + 2i + j = old row h*d + j*d/2 + i.
TensorFill PermuteRows(WeightView v, int64_t heads) {
  return [v, heads](uint8_t* out) {
    const int64_t d = v.rows / heads, half = d / 2;
    const size_t row_bytes = static_cast<size_t>(v.cols * common::DTypeSize(v.dtype));
    const uint8_t* src = static_cast<const uint8_t*>(v.data);
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        for (int64_t j = 0; j < 2; ++j) {
          std::memcpy(out + (h * d + 2 * i + j) * row_bytes,
                      src + (h * d + j * half + i) * row_bytes, row_bytes);
        }
      }
    }
    return absl::OkStatus();
  };
}

// Experts stacked: [n_expert][rows][cols] -> ne {cols, rows, n_expert}.
TensorFill StackExperts(std::vector<WeightView> views) {
  return [views](uint8_t* out) {
    for (const WeightView& v : views) {
      const size_t n = static_cast<size_t>(v.rows * v.cols * common::DTypeSize(v.dtype));
      std::memcpy(out, v.data, n);
      out += n;
    }
    return absl::OkStatus();
  };
}

// The vocabulary from tokenizer.json. A SentencePiece-style BPE (byte_fallback: Mistral/Mixtral,
// the make-model presets of every arch) -> llama.cpp's "llama" model, scores from the ids; a
// byte-level BPE (Qwen, OLMoE as they ship) -> its "gpt2" model with the merges and `gpt2_pre` as
// the pre-tokenizer. Added tokens: control (special) or user-defined; ids without a token are
// "[PADn]", unused.
absl::Status AddVocab(const std::string& tokenizer_path, const ModelConfig& c,
                      const std::string& gpt2_pre, GgufWriter& w) {
  std::ifstream in(tokenizer_path);
  if (!in) return absl::NotFoundError("cannot open " + tokenizer_path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(tokenizer_path + ": " + e.what());
  }
  const auto& model = j["model"];
  if (model.value("type", "") != "BPE") {
    return absl::UnimplementedError(tokenizer_path + ": only BPE tokenizers are exported");
  }
  const bool spm = model.value("byte_fallback", false);
  const int64_t n = c.vocab_size;
  std::vector<std::string> tokens(n);
  std::vector<float> scores(n, 0.0f);
  std::vector<int32_t> types(n, 1);  // normal
  std::vector<bool> have(n, false);
  for (const auto& [tok, id_json] : model["vocab"].items()) {
    const int64_t id = id_json.get<int64_t>();
    if (id < 0 || id >= n) continue;
    tokens[id] = tok;
    have[id] = true;
    // SentencePiece scores: earlier (lower-id) pieces win; token ids follow the merge order.
    if (spm) scores[id] = -static_cast<float>(id);
    if (spm && tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') {
      types[id] = 6;  // byte
    }
  }
  const std::string unk = model.value("unk_token", "");
  int64_t unk_id = -1;
  for (const auto& a : j.value("added_tokens", nlohmann::json::array())) {
    const int64_t id = a["id"].get<int64_t>();
    if (id < 0 || id >= n) continue;
    tokens[id] = a["content"].get<std::string>();
    have[id] = true;
    scores[id] = 0;
    types[id] = a.value("special", false) ? 3 : 4;  // control / user-defined
    if (spm && tokens[id] == unk) {
      types[id] = 2;
      unk_id = id;
    }
  }
  for (int64_t id = 0; id < n; ++id) {
    if (!have[id]) {
      tokens[id] = absl::StrCat("[PAD", id, "]");
      types[id] = 5;  // unused
    }
  }
  if (spm) {
    w.AddString("tokenizer.ggml.model", "llama");
    w.AddString("tokenizer.ggml.pre", "default");
  } else {
    // Merges as "left right" (tokenizers writes either that or a [left, right] pair).
    std::vector<std::string> merges;
    for (const auto& m : model.value("merges", nlohmann::json::array())) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2) {
        merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
      } else {
        return absl::InvalidArgumentError(tokenizer_path + ": malformed merge " + m.dump());
      }
    }
    w.AddString("tokenizer.ggml.model", "gpt2");
    w.AddString("tokenizer.ggml.pre", gpt2_pre);
    w.AddStringArray("tokenizer.ggml.merges", merges);
  }
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  if (spm) w.AddFloat32Array("tokenizer.ggml.scores", scores);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  if (c.bos_token_id >= 0) w.AddUint32("tokenizer.ggml.bos_token_id", c.bos_token_id);
  if (c.eos_token_id >= 0) w.AddUint32("tokenizer.ggml.eos_token_id", c.eos_token_id);
  if (c.pad_token_id >= 0) w.AddUint32("tokenizer.ggml.padding_token_id", c.pad_token_id);
  if (unk_id >= 0) w.AddUint32("tokenizer.ggml.unknown_token_id", unk_id);
  // SentencePiece-style tokenizers prepend <s> (their TemplateProcessing); byte-level ones don't.
  w.AddBool("tokenizer.ggml.add_bos_token", spm);
  w.AddBool("tokenizer.ggml.add_eos_token", false);
  return absl::OkStatus();
}

// llama.cpp's architecture name and the pre-tokenizer its converter picks for a byte-level BPE.
struct GgufArch {
  const char* name;
  const char* gpt2_pre;
};
GgufArch ArchOf(Arch a) {
  switch (a) {
    case Arch::kMixtral:
      return {"llama", "default"};
    case Arch::kQwen2Moe:
      return {"qwen2moe", "qwen2"};
    case Arch::kQwen3Moe:
      return {"qwen3moe", "qwen2"};
    case Arch::kOlmoe:
      return {"olmoe", "olmo"};
  }
  return {"?", "default"};
}

// What llama.cpp's graph for the arch (src/models/<arch>.cpp) cannot express: Unimplemented.
absl::Status CheckExportable(const ModelConfig& c) {
  auto no = [&](const std::string& what) {
    return absl::UnimplementedError(absl::StrCat("export-gguf: llama.cpp's ", ArchOf(c.arch).name,
                                                 " architecture has no ", what, " (",
                                                 c.architecture, ")"));
  };
  if (c.dtype == DType::kF16) {
    return absl::UnimplementedError("export-gguf supports F32 and BF16 checkpoints only");
  }
  if (c.sliding_window > 0) return no("sliding window");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.IsMoeLayer(l)) return no("dense (mlp_only_layers / decoder_sparse_step) layers");
  }
  switch (c.arch) {
    case Arch::kMixtral:
      break;
    case Arch::kQwen2Moe:
      // qwen2moe: top-k weights never renormalised; attention sized n_embd x n_embd.
      if (c.norm_topk_prob) return no("norm_topk_prob = true");
      if (c.q_size() != c.hidden_size) return no("head_dim * heads != hidden_size");
      break;
    case Arch::kQwen3Moe:
      // qwen3moe: top-k weights always renormalised; q/k/v biases optional, no o_proj bias.
      if (!c.norm_topk_prob) return no("norm_topk_prob = false");
      if (c.o_proj_bias) return no("attention_bias (o_proj bias)");
      break;
    case Arch::kOlmoe:
      if (c.norm_topk_prob) return no("norm_topk_prob = true");
      if (c.clip_qkv > 0) return no("clip_qkv");
      if (c.o_proj_bias) return no("attention_bias (o_proj bias)");
      if (c.q_size() != c.hidden_size) return no("head_dim * heads != hidden_size");
      // Its k_norm is [n_embd] where HF's is [kv_heads * head_dim]: kv heads must equal heads.
      if (c.num_key_value_heads != c.num_attention_heads) return no("grouped-query attention");
      break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExportStats> ExportGguf(const std::string& model_dir, const std::string& out_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(model_dir));
  const ModelConfig& c = ckpt->config();
  RETURN_IF_ERROR(CheckExportable(c));
  const GgufArch arch = ArchOf(c.arch);
  const std::string a = arch.name;
  // llama.cpp's llama architecture rotates interleaved pairs (its converter permutes q/k rows);
  // qwen2moe, qwen3moe and olmoe rotate halves (LLAMA_ROPE_TYPE_NEOX) as HF does: rows as stored.
  const bool permute_qk = c.arch == Arch::kMixtral;
  const ModelWeights& mw = ckpt->weights();
  GgufWriter w;
  w.AddString("general.architecture", a);
  w.AddString("general.name",
              std::filesystem::path(model_dir).lexically_normal().filename().string());
  w.AddUint32("general.alignment", static_cast<uint32_t>(kAlignment));
  // llama_ftype: 0 = all F32, 32 = mostly BF16.
  w.AddUint32("general.file_type", c.dtype == DType::kBF16 ? 32 : 0);
  auto u32 = [&](const std::string& key, int64_t v) {
    w.AddUint32(a + "." + key, static_cast<uint32_t>(v));
  };
  u32("vocab_size", c.vocab_size);
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.hidden_size);
  u32("block_count", c.num_hidden_layers);
  // The expert width: llama and olmoe read it from feed_forward_length, the Qwen graphs from
  // expert_feed_forward_length (feed_forward_length is then the dense width, as the converter).
  if (c.arch == Arch::kQwen2Moe || c.arch == Arch::kQwen3Moe) {
    u32("feed_forward_length", c.intermediate_size);
    u32("expert_feed_forward_length", c.moe_intermediate_size);
  } else {
    u32("feed_forward_length", c.moe_intermediate_size);
  }
  if (c.shared_expert_intermediate_size > 0) {
    u32("expert_shared_feed_forward_length", c.shared_expert_intermediate_size);
  }
  u32("attention.head_count", c.num_attention_heads);
  u32("attention.head_count_kv", c.num_key_value_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  u32("rope.dimension_count", c.head_dim);
  w.AddFloat32(a + ".rope.freq_base", static_cast<float>(c.rope_theta));
  w.AddFloat32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  u32("expert_count", c.num_experts);
  u32("expert_used_count", c.num_experts_per_tok);
  RETURN_IF_ERROR(AddVocab(model_dir + "/tokenizer.json", c, arch.gpt2_pre, w));

  const GgmlType wt = TypeOf(c.dtype);
  auto ne2 = [](const WeightView& v) { return std::vector<int64_t>{v.cols, v.rows}; };
  auto ne1 = [](const WeightView& v) { return std::vector<int64_t>{v.rows * v.cols}; };
  // Small 1-D tensors (norms, biases, the shared-expert gate) in F32: exact for BF16.
  auto f32_1d = [&](const std::string& name, const WeightView& v) {
    w.AddTensor(name, GgmlType::kF32, ne1(v), ToF32(v));
  };
  auto qk = [&](const WeightView& v, int64_t heads) {
    return permute_qk ? PermuteRows(v, heads) : CopyView(v);
  };
  w.AddTensor("token_embd.weight", wt, ne2(mw.embed_tokens), CopyView(mw.embed_tokens));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = mw.layers[l];
    const std::string b = absl::StrCat("blk.", l, ".");
    f32_1d(b + "attn_norm.weight", L.input_norm);
    w.AddTensor(b + "attn_q.weight", wt, ne2(L.q_proj), qk(L.q_proj, c.num_attention_heads));
    w.AddTensor(b + "attn_k.weight", wt, ne2(L.k_proj), qk(L.k_proj, c.num_key_value_heads));
    w.AddTensor(b + "attn_v.weight", wt, ne2(L.v_proj), CopyView(L.v_proj));
    if (L.q_bias.data != nullptr) f32_1d(b + "attn_q.bias", L.q_bias);
    if (L.k_bias.data != nullptr) f32_1d(b + "attn_k.bias", L.k_bias);
    if (L.v_bias.data != nullptr) f32_1d(b + "attn_v.bias", L.v_bias);
    // Qwen3-MoE: [head_dim], applied per head; OLMoE: [heads * head_dim], over the projection.
    if (L.q_norm.data != nullptr) f32_1d(b + "attn_q_norm.weight", L.q_norm);
    if (L.k_norm.data != nullptr) f32_1d(b + "attn_k_norm.weight", L.k_norm);
    w.AddTensor(b + "attn_output.weight", wt, ne2(L.o_proj), CopyView(L.o_proj));
    f32_1d(b + "ffn_norm.weight", L.post_attn_norm);
    w.AddTensor(b + "ffn_gate_inp.weight", GgmlType::kF32, ne2(L.router), ToF32(L.router));
    std::vector<WeightView> gate, up, down;
    for (const ExpertWeights& e : L.experts) {
      gate.push_back(e.gate);
      up.push_back(e.up);
      down.push_back(e.down);
    }
    const int64_t ne = c.num_experts;
    const int64_t ff = c.moe_intermediate_size;
    w.AddTensor(b + "ffn_gate_exps.weight", wt, {c.hidden_size, ff, ne}, StackExperts(gate));
    w.AddTensor(b + "ffn_down_exps.weight", wt, {ff, c.hidden_size, ne}, StackExperts(down));
    w.AddTensor(b + "ffn_up_exps.weight", wt, {c.hidden_size, ff, ne}, StackExperts(up));
    if (c.shared_expert_intermediate_size > 0) {
      // Qwen2-MoE: sigmoid(shared_expert_gate . x) * shared_expert(x); the gate as [hidden].
      f32_1d(b + "ffn_gate_inp_shexp.weight", L.shared_expert_gate);
      const ExpertWeights& s = L.shared_expert;
      w.AddTensor(b + "ffn_gate_shexp.weight", wt, ne2(s.gate), CopyView(s.gate));
      w.AddTensor(b + "ffn_down_shexp.weight", wt, ne2(s.down), CopyView(s.down));
      w.AddTensor(b + "ffn_up_shexp.weight", wt, ne2(s.up), CopyView(s.up));
    }
  }
  f32_1d("output_norm.weight", mw.final_norm);
  w.AddTensor("output.weight", wt, ne2(mw.lm_head), CopyView(mw.lm_head));
  RETURN_IF_ERROR(w.WriteFile(out_path));
  ExportStats stats;
  stats.tensors = w.num_tensors();
  stats.bytes = static_cast<int64_t>(std::filesystem::file_size(out_path));
  return stats;
}

}  // namespace moe::model::gguf
