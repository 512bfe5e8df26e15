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

absl::Status AddVocab(const std::string& tokenizer_path, const ModelConfig& c, GgufWriter& w) {
  std::ifstream in(tokenizer_path);
  if (!in) return absl::NotFoundError("cannot open " + tokenizer_path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(tokenizer_path + ": " + e.what());
  }
  const auto& model = j["model"];
  if (model.value("type", "") != "BPE" || !model.value("byte_fallback", false)) {
    return absl::UnimplementedError(
        tokenizer_path + ": only SentencePiece-style BPE with byte_fallback is exported");
  }
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
    scores[id] = -static_cast<float>(id);
    if (tok.size() == 6 && tok.compare(0, 3, "<0x") == 0 && tok[5] == '>') types[id] = 6;  // byte
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
    if (tokens[id] == unk) {
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
  w.AddString("tokenizer.ggml.model", "llama");
  w.AddString("tokenizer.ggml.pre", "default");
  w.AddStringArray("tokenizer.ggml.tokens", tokens);
  w.AddFloat32Array("tokenizer.ggml.scores", scores);
  w.AddInt32Array("tokenizer.ggml.token_type", types);
  if (c.bos_token_id >= 0) w.AddUint32("tokenizer.ggml.bos_token_id", c.bos_token_id);
  if (c.eos_token_id >= 0) w.AddUint32("tokenizer.ggml.eos_token_id", c.eos_token_id);
  if (unk_id >= 0) w.AddUint32("tokenizer.ggml.unknown_token_id", unk_id);
  w.AddBool("tokenizer.ggml.add_bos_token", true);
  w.AddBool("tokenizer.ggml.add_eos_token", false);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExportStats> ExportGgufLlama(const std::string& model_dir,
                                            const std::string& out_path) {
  ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt, Checkpoint::Open(model_dir));
  const ModelConfig& c = ckpt->config();
  if (c.arch != Arch::kMixtral) {
    return absl::UnimplementedError("export-gguf supports Mixtral checkpoints only, not " +
                                    c.architecture);
  }
  if (c.dtype == DType::kF16) {
    return absl::UnimplementedError("export-gguf supports F32 and BF16 checkpoints only");
  }
  if (c.sliding_window > 0) {
    return absl::UnimplementedError(
        "export-gguf: llama.cpp's llama architecture has no sliding window");
  }
  const ModelWeights& mw = ckpt->weights();
  GgufWriter w;
  w.AddString("general.architecture", "llama");
  w.AddString("general.name",
              std::filesystem::path(model_dir).lexically_normal().filename().string());
  w.AddUint32("general.alignment", static_cast<uint32_t>(kAlignment));
  // llama_ftype: 0 = all F32, 32 = mostly BF16.
  w.AddUint32("general.file_type", c.dtype == DType::kBF16 ? 32 : 0);
  w.AddUint32("llama.vocab_size", static_cast<uint32_t>(c.vocab_size));
  w.AddUint32("llama.context_length", static_cast<uint32_t>(c.max_position_embeddings));
  w.AddUint32("llama.embedding_length", static_cast<uint32_t>(c.hidden_size));
  w.AddUint32("llama.block_count", static_cast<uint32_t>(c.num_hidden_layers));
  w.AddUint32("llama.feed_forward_length", static_cast<uint32_t>(c.moe_intermediate_size));
  w.AddUint32("llama.attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  w.AddUint32("llama.attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  w.AddUint32("llama.attention.key_length", static_cast<uint32_t>(c.head_dim));
  w.AddUint32("llama.attention.value_length", static_cast<uint32_t>(c.head_dim));
  w.AddUint32("llama.rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  w.AddFloat32("llama.rope.freq_base", static_cast<float>(c.rope_theta));
  w.AddFloat32("llama.attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  w.AddUint32("llama.expert_count", static_cast<uint32_t>(c.num_experts));
  w.AddUint32("llama.expert_used_count", static_cast<uint32_t>(c.num_experts_per_tok));
  RETURN_IF_ERROR(AddVocab(model_dir + "/tokenizer.json", c, w));

  const GgmlType wt = TypeOf(c.dtype);
  auto ne2 = [](const WeightView& v) { return std::vector<int64_t>{v.cols, v.rows}; };
  auto ne1 = [](const WeightView& v) { return std::vector<int64_t>{v.rows * v.cols}; };
  w.AddTensor("token_embd.weight", wt, ne2(mw.embed_tokens), CopyView(mw.embed_tokens));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& L = mw.layers[l];
    const std::string b = absl::StrCat("blk.", l, ".");
    w.AddTensor(b + "attn_norm.weight", GgmlType::kF32, ne1(L.input_norm), ToF32(L.input_norm));
    w.AddTensor(b + "attn_q.weight", wt, ne2(L.q_proj),
                PermuteRows(L.q_proj, c.num_attention_heads));
    w.AddTensor(b + "attn_k.weight", wt, ne2(L.k_proj),
                PermuteRows(L.k_proj, c.num_key_value_heads));
    w.AddTensor(b + "attn_v.weight", wt, ne2(L.v_proj), CopyView(L.v_proj));
    w.AddTensor(b + "attn_output.weight", wt, ne2(L.o_proj), CopyView(L.o_proj));
    w.AddTensor(b + "ffn_norm.weight", GgmlType::kF32, ne1(L.post_attn_norm),
                ToF32(L.post_attn_norm));
    w.AddTensor(b + "ffn_gate_inp.weight", GgmlType::kF32, ne2(L.router), ToF32(L.router));
    std::vector<WeightView> gate, up, down;
    for (const ExpertWeights& e : L.experts) {
      gate.push_back(e.gate);
      up.push_back(e.up);
      down.push_back(e.down);
    }
    const int64_t ne = c.num_experts;
    w.AddTensor(b + "ffn_gate_exps.weight", wt, {c.hidden_size, c.moe_intermediate_size, ne},
                StackExperts(gate));
    w.AddTensor(b + "ffn_down_exps.weight", wt, {c.moe_intermediate_size, c.hidden_size, ne},
                StackExperts(down));
    w.AddTensor(b + "ffn_up_exps.weight", wt, {c.hidden_size, c.moe_intermediate_size, ne},
                StackExperts(up));
  }
  w.AddTensor("output_norm.weight", GgmlType::kF32, ne1(mw.final_norm), ToF32(mw.final_norm));
  w.AddTensor("output.weight", wt, ne2(mw.lm_head), CopyView(mw.lm_head));
  RETURN_IF_ERROR(w.WriteFile(out_path));
  ExportStats stats;
  stats.tensors = w.num_tensors();
  stats.bytes = static_cast<int64_t>(std::filesystem::file_size(out_path));
  return stats;
}

}  // namespace moe::model::gguf
