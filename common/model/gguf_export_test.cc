#include "common/model/gguf_export.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "common/base/file.h"
#include "common/model/checkpoint.h"
#include "common/model/gguf_reader.h"
#include "common/model/make_model.h"
#include "common/tensor/dtype.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"

namespace moe::model::gguf {
namespace {

namespace fs = std::filesystem;
using common::DType;
using common::testing::StatusIs;

std::string ReadAll(const std::string& path) { return common::ReadFile(path).value(); }

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
  auto stats = ExportGgufLlama(model, out);
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
  const std::string bytes = ReadAll(out);
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

}  // namespace
}  // namespace moe::model::gguf
