#include "common/model/gguf_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/base/file.h"
#include "common/model/checkpoint.h"
#include "common/model/gguf_reader.h"
#include "common/model/make_model.h"
#include "common/tensor/dtype.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "nlohmann/json.hpp"

namespace moe::model::gguf {
namespace {

namespace fs = std::filesystem;
using common::DType;
using common::testing::StatusIs;

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  return out ? absl::OkStatus() : absl::InternalError("cannot write " + path);
}

uint64_t Fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

class GgufExportTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("gguf_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(GgufExportTest, ExportsTinyMixtralAsLlamaWithExperts) {
  MakeModelOptions o;
  o.preset = Preset::kTiny;
  o.dtype = DType::kBF16;
  const std::string model = dir_ + "/tiny";
  ASSERT_TRUE(MakeModel(o, model).ok());
  const std::string out = dir_ + "/tiny.gguf";
  auto stats = ExportGguf(model, out);
  ASSERT_TRUE(stats.ok()) << stats.status();

  auto ckpt = Checkpoint::Open(model);
  ASSERT_TRUE(ckpt.ok());
  const ModelConfig& c = (*ckpt)->config();
  auto info = ReadGgufHeader(out);
  ASSERT_TRUE(info.ok()) << info.status();
  const auto& md = info->metadata;
  EXPECT_EQ(md.at("general.architecture").s(), "llama");
  EXPECT_EQ(md.at("llama.embedding_length").u(), static_cast<uint64_t>(c.hidden_size));
  EXPECT_EQ(md.at("llama.block_count").u(), static_cast<uint64_t>(c.num_hidden_layers));
  EXPECT_EQ(md.at("llama.feed_forward_length").u(), static_cast<uint64_t>(c.moe_intermediate_size));
  EXPECT_EQ(md.at("llama.attention.head_count").u(), static_cast<uint64_t>(c.num_attention_heads));
  EXPECT_EQ(md.at("llama.attention.head_count_kv").u(),
            static_cast<uint64_t>(c.num_key_value_heads));
  EXPECT_EQ(md.at("llama.expert_count").u(), 8u);
  EXPECT_EQ(md.at("llama.expert_used_count").u(), 2u);
  EXPECT_EQ(md.at("llama.rope.dimension_count").u(), static_cast<uint64_t>(c.head_dim));
  EXPECT_FLOAT_EQ(md.at("llama.rope.freq_base").f(), static_cast<float>(c.rope_theta));
  EXPECT_EQ(md.at("tokenizer.ggml.model").s(), "llama");
  const Value& tokens = md.at("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.array.size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ(std::get<std::string>(tokens.array[c.bos_token_id]), "<s>");
  EXPECT_EQ(md.at("tokenizer.ggml.token_type").array.size(), static_cast<size_t>(c.vocab_size));
  EXPECT_EQ(md.at("tokenizer.ggml.bos_token_id").u(), static_cast<uint64_t>(c.bos_token_id));

  // 2 global + output + 10 per layer.
  ASSERT_EQ(info->tensors.size(), static_cast<size_t>(3 + 10 * c.num_hidden_layers));
  std::map<std::string, TensorEntry> by_name;
  for (const TensorEntry& t : info->tensors) by_name[t.name] = t;
  const TensorEntry& gate = by_name.at("blk.1.ffn_gate_exps.weight");
  EXPECT_EQ(gate.type, GgmlType::kBF16);
  EXPECT_EQ(gate.ne, (std::vector<int64_t>{c.hidden_size, c.moe_intermediate_size, 8}));
  EXPECT_EQ(by_name.at("blk.0.ffn_down_exps.weight").ne,
            (std::vector<int64_t>{c.moe_intermediate_size, c.hidden_size, 8}));
  EXPECT_EQ(by_name.at("blk.0.attn_norm.weight").type, GgmlType::kF32);
  EXPECT_EQ(by_name.at("blk.0.ffn_gate_inp.weight").type, GgmlType::kF32);
  EXPECT_EQ(by_name.at("token_embd.weight").ne,
            (std::vector<int64_t>{c.hidden_size, c.vocab_size}));

  // Data: expert 3's gate of layer 1 is stored verbatim at its slot of the stack.
  const std::string bytes = common::ReadFile(out).value();
  const WeightView e3 = (*ckpt)->weights().layers[1].experts[3].gate;
  const size_t ebytes = static_cast<size_t>(e3.rows * e3.cols * 2);
  const uint8_t* got =
      reinterpret_cast<const uint8_t*>(bytes.data()) + info->data_offset + gate.offset + 3 * ebytes;
  EXPECT_EQ(Fnv1a(got, ebytes), Fnv1a(static_cast<const uint8_t*>(e3.data), ebytes));

  // q rows are interleaved per head: GGUF row 2i+1 of head 0 is HF row d/2 + i.
  const WeightView q = (*ckpt)->weights().layers[0].q_proj;
  const TensorEntry& tq = by_name.at("blk.0.attn_q.weight");
  const size_t row = static_cast<size_t>(q.cols * 2);
  const uint8_t* q_gguf =
      reinterpret_cast<const uint8_t*>(bytes.data()) + info->data_offset + tq.offset;
  const uint8_t* q_hf = static_cast<const uint8_t*>(q.data);
  const int64_t half = c.head_dim / 2;
  EXPECT_EQ(std::memcmp(q_gguf + 3 * row, q_hf + (half + 1) * row, row), 0);
  EXPECT_EQ(std::memcmp(q_gguf + 2 * row, q_hf + 1 * row, row), 0);

  // Norms are widened exactly: bf16 -> f32.
  const WeightView n0 = (*ckpt)->weights().layers[0].input_norm;
  float f0 = 0;
  std::memcpy(&f0, bytes.data() + info->data_offset + by_name.at("blk.0.attn_norm.weight").offset,
              4);
  EXPECT_EQ(f0, common::Bf16ToF32(static_cast<const uint16_t*>(n0.data)[0]));
}

// name -> "TYPE ne0,ne1,..." for the tensors of a file.
std::map<std::string, std::string> TensorTable(const FileInfo& info) {
  std::map<std::string, std::string> t;
  for (const TensorEntry& e : info.tensors) {
    std::string s = e.type == GgmlType::kF32 ? "F32" : e.type == GgmlType::kBF16 ? "BF16" : "F16";
    for (size_t i = 0; i < e.ne.size(); ++i) s += (i == 0 ? " " : ",") + std::to_string(e.ne[i]);
    t[e.name] = s;
  }
  return t;
}

// The tensors of layer 0 and the globals, as a sorted "name TYPE ne" list (one per line).
std::string Layer0(const FileInfo& info) {
  std::string out;
  for (const auto& [name, desc] : TensorTable(info)) {
    if (name.rfind("blk.", 0) == 0 && name.rfind("blk.0.", 0) != 0) continue;
    out += name + " " + desc + "\n";
  }
  return out;
}

class GgufExportArchTest : public GgufExportTest {
 protected:
  // Makes a tiny bf16 checkpoint of `arch` and exports it; returns the header read back.
  FileInfo Export(Arch arch, int64_t kv_heads = 0) {
    MakeModelOptions o;
    o.preset = Preset::kTiny;
    o.arch = arch;
    o.dtype = DType::kBF16;
    o.kv_heads = kv_heads;
    model_ = dir_ + "/" + std::string(ModelTypeName(arch));
    EXPECT_TRUE(MakeModel(o, model_).ok());
    out_ = model_ + ".gguf";
    auto stats = ExportGguf(model_, out_);
    EXPECT_TRUE(stats.ok()) << stats.status();
    auto info = ReadGgufHeader(out_);
    EXPECT_TRUE(info.ok()) << info.status();
    return info.ok() ? *info : FileInfo{};
  }
  // The bytes of tensor `name` in the exported file.
  std::string TensorBytes(const FileInfo& info, const std::string& name) {
    for (const TensorEntry& t : info.tensors) {
      if (t.name == name) {
        return common::ReadFile(out_).value().substr(info.data_offset + t.offset,
                                                     static_cast<size_t>(t.nbytes()));
      }
    }
    return "";
  }
  std::string model_, out_;
};

TEST_F(GgufExportArchTest, Qwen2MoeHasBiasesAndTheSharedExpert) {
  const FileInfo info = Export(Arch::kQwen2Moe);
  const auto& md = info.metadata;
  EXPECT_EQ(md.at("general.architecture").s(), "qwen2moe");
  EXPECT_EQ(md.at("qwen2moe.expert_feed_forward_length").u(), 128u);
  EXPECT_EQ(md.at("qwen2moe.expert_shared_feed_forward_length").u(), 256u);
  EXPECT_EQ(md.at("qwen2moe.feed_forward_length").u(), 128u);
  EXPECT_EQ(md.at("qwen2moe.expert_count").u(), 8u);
  EXPECT_EQ(md.at("qwen2moe.expert_used_count").u(), 2u);
  EXPECT_EQ(md.at("qwen2moe.attention.head_count_kv").u(), 2u);
  EXPECT_FLOAT_EQ(md.at("qwen2moe.attention.layer_norm_rms_epsilon").f(), 1e-6f);
  EXPECT_EQ(md.count("llama.block_count"), 0u);
  // The preset tokenizer is SentencePiece-style whatever the arch.
  EXPECT_EQ(md.at("tokenizer.ggml.model").s(), "llama");
  EXPECT_EQ(Layer0(info),
            "blk.0.attn_k.bias F32 32\n"
            "blk.0.attn_k.weight BF16 64,32\n"
            "blk.0.attn_norm.weight F32 64\n"
            "blk.0.attn_output.weight BF16 64,64\n"
            "blk.0.attn_q.bias F32 64\n"
            "blk.0.attn_q.weight BF16 64,64\n"
            "blk.0.attn_v.bias F32 32\n"
            "blk.0.attn_v.weight BF16 64,32\n"
            "blk.0.ffn_down_exps.weight BF16 128,64,8\n"
            "blk.0.ffn_down_shexp.weight BF16 256,64\n"
            "blk.0.ffn_gate_exps.weight BF16 64,128,8\n"
            "blk.0.ffn_gate_inp.weight F32 64,8\n"
            "blk.0.ffn_gate_inp_shexp.weight F32 64\n"
            "blk.0.ffn_gate_shexp.weight BF16 64,256\n"
            "blk.0.ffn_norm.weight F32 64\n"
            "blk.0.ffn_up_exps.weight BF16 64,128,8\n"
            "blk.0.ffn_up_shexp.weight BF16 64,256\n"
            "output.weight BF16 64,512\n"
            "output_norm.weight F32 64\n"
            "token_embd.weight BF16 64,512\n");
  EXPECT_EQ(info.tensors.size(), 3u + 17u * 2u);
  // NEOX rotary like HF: q rows are stored unpermuted.
  auto ckpt = Checkpoint::Open(model_);
  ASSERT_TRUE(ckpt.ok());
  const WeightView q = (*ckpt)->weights().layers[1].q_proj;
  EXPECT_EQ(TensorBytes(info, "blk.1.attn_q.weight"),
            std::string(static_cast<const char*>(q.data), q.rows * q.cols * 2));
}

TEST_F(GgufExportArchTest, Qwen3MoeHasPerHeadQkNorms) {
  const FileInfo info = Export(Arch::kQwen3Moe);
  const auto& md = info.metadata;
  EXPECT_EQ(md.at("general.architecture").s(), "qwen3moe");
  EXPECT_EQ(md.at("qwen3moe.expert_feed_forward_length").u(), 128u);
  EXPECT_EQ(md.count("qwen3moe.expert_shared_feed_forward_length"), 0u);
  EXPECT_EQ(md.at("qwen3moe.attention.key_length").u(), 16u);
  EXPECT_EQ(Layer0(info),
            "blk.0.attn_k.weight BF16 64,32\n"
            "blk.0.attn_k_norm.weight F32 16\n"
            "blk.0.attn_norm.weight F32 64\n"
            "blk.0.attn_output.weight BF16 64,64\n"
            "blk.0.attn_q.weight BF16 64,64\n"
            "blk.0.attn_q_norm.weight F32 16\n"
            "blk.0.attn_v.weight BF16 64,32\n"
            "blk.0.ffn_down_exps.weight BF16 128,64,8\n"
            "blk.0.ffn_gate_exps.weight BF16 64,128,8\n"
            "blk.0.ffn_gate_inp.weight F32 64,8\n"
            "blk.0.ffn_norm.weight F32 64\n"
            "blk.0.ffn_up_exps.weight BF16 64,128,8\n"
            "output.weight BF16 64,512\n"
            "output_norm.weight F32 64\n"
            "token_embd.weight BF16 64,512\n");
  // The q norm widened exactly.
  auto ckpt = Checkpoint::Open(model_);
  ASSERT_TRUE(ckpt.ok());
  const WeightView n = (*ckpt)->weights().layers[0].q_norm;
  const std::string got = TensorBytes(info, "blk.0.attn_q_norm.weight");
  ASSERT_EQ(got.size(), 16u * 4);
  for (int i = 0; i < 16; ++i) {
    float f = 0;
    std::memcpy(&f, got.data() + 4 * i, 4);
    EXPECT_EQ(f, common::Bf16ToF32(static_cast<const uint16_t*>(n.data)[i])) << i;
  }
}

TEST_F(GgufExportArchTest, OlmoeHasQkNormsOverTheProjection) {
  const FileInfo info = Export(Arch::kOlmoe, /*kv_heads=*/4);
  const auto& md = info.metadata;
  EXPECT_EQ(md.at("general.architecture").s(), "olmoe");
  EXPECT_EQ(md.at("olmoe.feed_forward_length").u(), 128u);
  EXPECT_FLOAT_EQ(md.at("olmoe.attention.layer_norm_rms_epsilon").f(), 1e-5f);
  EXPECT_EQ(md.at("tokenizer.ggml.padding_token_id").u(), 0u);
  EXPECT_EQ(Layer0(info),
            "blk.0.attn_k.weight BF16 64,64\n"
            "blk.0.attn_k_norm.weight F32 64\n"
            "blk.0.attn_norm.weight F32 64\n"
            "blk.0.attn_output.weight BF16 64,64\n"
            "blk.0.attn_q.weight BF16 64,64\n"
            "blk.0.attn_q_norm.weight F32 64\n"
            "blk.0.attn_v.weight BF16 64,64\n"
            "blk.0.ffn_down_exps.weight BF16 128,64,8\n"
            "blk.0.ffn_gate_exps.weight BF16 64,128,8\n"
            "blk.0.ffn_gate_inp.weight F32 64,8\n"
            "blk.0.ffn_norm.weight F32 64\n"
            "blk.0.ffn_up_exps.weight BF16 64,128,8\n"
            "output.weight BF16 64,512\n"
            "output_norm.weight F32 64\n"
            "token_embd.weight BF16 64,512\n");
}

TEST_F(GgufExportArchTest, RefusesWhatTheLlamaCppGraphCannotRun) {
  // OLMoE with grouped-query attention: llama.cpp's olmoe k_norm is [n_embd].
  MakeModelOptions o;
  o.preset = Preset::kTiny;
  o.arch = Arch::kOlmoe;
  const std::string olmoe = dir_ + "/olmoe-gqa";
  ASSERT_TRUE(MakeModel(o, olmoe).ok());
  EXPECT_THAT(ExportGguf(olmoe, dir_ + "/x.gguf").status(),
              StatusIs(absl::StatusCode::kUnimplemented, ::testing::HasSubstr("grouped-query")));
  // Qwen2-MoE with renormalised top-k weights: its graph never renormalises.
  o.arch = Arch::kQwen2Moe;
  const std::string qwen2 = dir_ + "/qwen2-norm";
  ASSERT_TRUE(MakeModel(o, qwen2).ok());
  std::string config = common::ReadFile(qwen2 + "/config.json").value();
  const std::string from = "\"norm_topk_prob\": false";
  ASSERT_NE(config.find(from), std::string::npos);
  config.replace(config.find(from), from.size(), "\"norm_topk_prob\": true");
  ASSERT_TRUE(WriteText(qwen2 + "/config.json", config).ok());
  EXPECT_THAT(ExportGguf(qwen2, dir_ + "/x.gguf").status(),
              StatusIs(absl::StatusCode::kUnimplemented, ::testing::HasSubstr("norm_topk_prob")));
}

TEST_F(GgufExportArchTest, ByteLevelBpeBecomesGpt2WithMerges) {
  MakeModelOptions o;
  o.preset = Preset::kTiny;
  o.arch = Arch::kQwen3Moe;
  const std::string model = dir_ + "/qwen3-bytelevel";
  ASSERT_TRUE(MakeModel(o, model).ok());
  // A byte-level BPE as Qwen ships it; merges as pairs (newer tokenizers) or "left right".
  const nlohmann::json tok = {
      {"added_tokens",
       {{{"id", 3}, {"content", "<|endoftext|>"}, {"special", true}},
        {{"id", 4}, {"content", "<tool>"}, {"special", false}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"byte_fallback", false},
        {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}},
        {"merges", nlohmann::json::array({nlohmann::json::array({"a", "b"}), "ab ab"})}}}};
  ASSERT_TRUE(WriteText(model + "/tokenizer.json", tok.dump()).ok());
  const std::string out = dir_ + "/qwen3-bytelevel.gguf";
  ASSERT_TRUE(ExportGguf(model, out).ok());
  auto info = ReadGgufHeader(out);
  ASSERT_TRUE(info.ok()) << info.status();
  const auto& md = info->metadata;
  EXPECT_EQ(md.at("tokenizer.ggml.model").s(), "gpt2");
  EXPECT_EQ(md.at("tokenizer.ggml.pre").s(), "qwen2");
  ASSERT_EQ(md.at("tokenizer.ggml.merges").array.size(), 2u);
  EXPECT_EQ(std::get<std::string>(md.at("tokenizer.ggml.merges").array[0]), "a b");
  EXPECT_EQ(std::get<std::string>(md.at("tokenizer.ggml.merges").array[1]), "ab ab");
  EXPECT_EQ(md.count("tokenizer.ggml.scores"), 0u);
  const auto& tokens = md.at("tokenizer.ggml.tokens").array;
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(std::get<std::string>(tokens[2]), "ab");
  EXPECT_EQ(std::get<std::string>(tokens[3]), "<|endoftext|>");
  EXPECT_EQ(std::get<std::string>(tokens[5]), "[PAD5]");
  const auto& types = md.at("tokenizer.ggml.token_type").array;
  EXPECT_EQ(std::get<int64_t>(types[0]), 1);  // normal
  EXPECT_EQ(std::get<int64_t>(types[3]), 3);  // control
  EXPECT_EQ(std::get<int64_t>(types[4]), 4);  // user-defined
  EXPECT_EQ(std::get<int64_t>(types[5]), 5);  // unused
  EXPECT_FALSE(std::get<bool>(md.at("tokenizer.ggml.add_bos_token").scalar));
}

}  // namespace
}  // namespace moe::model::gguf
