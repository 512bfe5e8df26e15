#include "common/model/make_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "common/base/file.h"
#include "common/model/checkpoint.h"
#include "common/model/checkpoint_layout.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

namespace fs = std::filesystem;
using common::DType;
using common::testing::StatusIs;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& p) { return common::ReadFile(p.string()).value(); }

int64_t CountParams(const ModelConfig& c, bool active_only) {
  int64_t n = 0;
  for (const TensorSlot& s : CheckpointTensors(c)) {
    int64_t k = 1;
    for (int64_t d : s.shape) k *= d;
    if (active_only && IsExpertRole(s.role) && s.expert >= c.num_experts_per_tok) continue;
    n += k;
  }
  return n;
}

class MakeModelTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("make_model_test"); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string dir_;
};

TEST_F(MakeModelTest, PresetSizesMatchTheDesign) {
  const ModelConfig tiny = PresetConfig(Preset::kTiny, Arch::kMixtral, DType::kF32);
  EXPECT_EQ(tiny.hidden_size, 64);
  EXPECT_EQ(tiny.moe_intermediate_size, 128);
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.num_attention_heads, 4);
  EXPECT_EQ(tiny.num_key_value_heads, 2);
  EXPECT_EQ(tiny.vocab_size, 512);
  EXPECT_EQ(tiny.max_position_embeddings, 4096);
  EXPECT_EQ(tiny.num_experts, 8);
  EXPECT_EQ(tiny.num_experts_per_tok, 2);
  EXPECT_NEAR(CountParams(tiny, false) / 1e6, 0.5, 0.05);
  const ModelConfig small = PresetConfig(Preset::kSmall, Arch::kMixtral, DType::kF32);
  EXPECT_NEAR(CountParams(small, false) / 1e6, 14, 1.0);
  const ModelConfig bench = PresetConfig(Preset::kBench, Arch::kMixtral, DType::kBF16);
  EXPECT_EQ(bench.hidden_size, 1024);
  EXPECT_EQ(bench.moe_intermediate_size, 2816);
  EXPECT_EQ(bench.num_attention_heads, 16);
  EXPECT_EQ(bench.num_key_value_heads, 4);
  EXPECT_EQ(bench.vocab_size, 32000);
  EXPECT_NEAR(CountParams(bench, false) / 1e9, 0.64, 0.01);
  EXPECT_NEAR(CountParams(bench, true) / 1e9, 0.22, 0.01);
  // Per-architecture features.
  const ModelConfig q2 = PresetConfig(Preset::kTiny, Arch::kQwen2Moe, DType::kF32);
  EXPECT_EQ(q2.shared_expert_intermediate_size, 256);
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.norm_topk_prob);
  const ModelConfig q3 = PresetConfig(Preset::kTiny, Arch::kQwen3Moe, DType::kF32);
  EXPECT_TRUE(q3.qk_norm && q3.qk_norm_per_head);
  const ModelConfig ol = PresetConfig(Preset::kTiny, Arch::kOlmoe, DType::kF32);
  EXPECT_TRUE(ol.qk_norm && !ol.qk_norm_per_head);
}

TEST_F(MakeModelTest, ConfigJsonIsCompleteAndRoundTrips) {
  for (Arch arch : {Arch::kMixtral, Arch::kQwen2Moe, Arch::kQwen3Moe, Arch::kOlmoe}) {
    const ModelConfig c = PresetConfig(Preset::kSmall, arch, DType::kBF16);
    const std::string text = ConfigJson(c);
    nlohmann::json j = nlohmann::json::parse(text);
    EXPECT_EQ(j["architectures"][0], c.architecture);
    EXPECT_EQ(j["model_type"], c.model_type);
    EXPECT_EQ(j["torch_dtype"], "bfloat16");
    EXPECT_TRUE(j.contains("transformers_version"));
    for (const char* key : {"hidden_size", "intermediate_size", "num_hidden_layers", "rope_theta",
                            "rms_norm_eps", "num_experts_per_tok", "tie_word_embeddings",
                            "initializer_range", "use_cache", "attention_dropout"}) {
      EXPECT_TRUE(j.contains(key)) << c.model_type << " lacks " << key;
    }
    switch (arch) {
      case Arch::kMixtral:
        EXPECT_EQ(j["num_local_experts"], 8);
        EXPECT_TRUE(j.contains("router_jitter_noise"));
        EXPECT_FALSE(j.contains("num_experts"));
        break;
      case Arch::kQwen2Moe:
        EXPECT_EQ(j["shared_expert_intermediate_size"], 1024);
        EXPECT_EQ(j["moe_intermediate_size"], 512);
        EXPECT_EQ(j["norm_topk_prob"], false);
        EXPECT_TRUE(j.contains("mlp_only_layers"));
        EXPECT_TRUE(j.contains("decoder_sparse_step"));
        break;
      case Arch::kQwen3Moe:
        EXPECT_EQ(j["head_dim"], 64);
        EXPECT_EQ(j["norm_topk_prob"], true);
        EXPECT_FALSE(j.contains("shared_expert_intermediate_size"));
        break;
      case Arch::kOlmoe:
        EXPECT_TRUE(j.contains("clip_qkv"));
        EXPECT_EQ(j["num_experts"], 8);
        EXPECT_FALSE(j.contains("moe_intermediate_size"));
        break;
    }
    ASSERT_OK_AND_ASSIGN(ModelConfig back, ParseModelConfig(text));
    EXPECT_EQ(ConfigJson(back), text) << c.model_type;
  }
}

TEST_F(MakeModelTest, SameFlagsGiveByteIdenticalFiles) {
  MakeModelOptions o;
  o.arch = Arch::kQwen2Moe;
  o.dtype = DType::kBF16;
  o.seed = 7;
  ASSERT_OK(MakeModel(o, dir_ + "/a"));
  ASSERT_OK(MakeModel(o, dir_ + "/b"));
  o.seed = 8;
  ASSERT_OK(MakeModel(o, dir_ + "/c"));
  for (const char* f : {"model.safetensors", "config.json", "generation_config.json",
                        "tokenizer.json", "tokenizer_config.json"}) {
    const std::string a = ReadFile(fs::path(dir_) / "a" / f);
    ASSERT_FALSE(a.empty()) << f;
    EXPECT_EQ(a, ReadFile(fs::path(dir_) / "b" / f)) << f;
  }
  EXPECT_NE(ReadFile(fs::path(dir_) / "a" / "model.safetensors"),
            ReadFile(fs::path(dir_) / "c" / "model.safetensors"));
}

TEST_F(MakeModelTest, EveryArchAndDtypeLoads) {
  for (Arch arch : {Arch::kMixtral, Arch::kQwen2Moe, Arch::kQwen3Moe, Arch::kOlmoe}) {
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      MakeModelOptions o;
      o.arch = arch;
      o.dtype = dtype;
      const std::string out = dir_ + "/m";
      ASSERT_OK(MakeModel(o, out));
      ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out));
      EXPECT_EQ(ck->config().arch, arch);
      EXPECT_EQ(ck->config().dtype, dtype);
      EXPECT_EQ(ck->weights().embed_tokens.dtype, dtype);
      EXPECT_EQ(ck->loaded_bytes(), CountParams(ck->config(), false) * common::DTypeSize(dtype));
    }
  }
}

TEST_F(MakeModelTest, TokenizerMatchesTheConfig) {
  for (Preset preset : {Preset::kTiny, Preset::kSmall}) {
    MakeModelOptions o;
    o.preset = preset;
    o.arch = Arch::kQwen2Moe;
    ASSERT_OK(MakeModel(o, dir_));
    ASSERT_OK_AND_ASSIGN(ModelConfig c, LoadModelConfig(dir_));
    nlohmann::json tok = nlohmann::json::parse(ReadFile(fs::path(dir_) / "tokenizer.json"));
    int64_t max_id = -1;
    for (const auto& [text, id] : tok["model"]["vocab"].items())
      max_id = std::max<int64_t>(max_id, id);
    EXPECT_EQ(max_id + 1, c.vocab_size);
    EXPECT_EQ(tok["model"]["vocab"]["<s>"], c.bos_token_id);
    EXPECT_EQ(tok["model"]["vocab"]["</s>"], c.eos_token_id);
    nlohmann::json tc = nlohmann::json::parse(ReadFile(fs::path(dir_) / "tokenizer_config.json"));
    EXPECT_EQ(tc["bos_token"], "<s>");
    EXPECT_EQ(tc["eos_token"], "</s>");
  }
}

TEST_F(MakeModelTest, ShardsWithAnIndexPastMaxShardBytes) {
  MakeModelOptions o;
  o.arch = Arch::kOlmoe;
  o.seed = 3;
  ASSERT_OK(MakeModel(o, dir_ + "/single"));
  o.max_shard_bytes = 600'000;
  int64_t last_done = -1, total = 0;
  o.progress = [&](int64_t done, int64_t t) {
    EXPECT_GT(done, last_done);
    last_done = done;
    total = t;
  };
  ASSERT_OK(MakeModel(o, dir_ + "/sharded"));
  EXPECT_EQ(last_done, total);
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "sharded" / "model.safetensors"));
  nlohmann::json index =
      nlohmann::json::parse(ReadFile(fs::path(dir_) / "sharded" / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00004.safetensors");
  ASSERT_OK_AND_ASSIGN(auto a, Checkpoint::Open(dir_ + "/single"));
  ASSERT_OK_AND_ASSIGN(auto b, Checkpoint::Open(dir_ + "/sharded"));
  EXPECT_EQ(b->mapped_files().size(), 4u);
  const WeightView& ea = a->weights().layers[1].experts[5].down;
  const WeightView& eb = b->weights().layers[1].experts[5].down;
  EXPECT_EQ(std::memcmp(ea.data, eb.data, ea.rows * ea.cols * 4), 0);
}

TEST_F(MakeModelTest, WeightsHaveTheIntendedScales) {
  MakeModelOptions o;
  o.arch = Arch::kQwen3Moe;
  ASSERT_OK(MakeModel(o, dir_));
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_));
  auto rms = [](const WeightView& v) {
    const float* p = static_cast<const float*>(v.data);
    double s = 0;
    for (int64_t i = 0; i < v.rows * v.cols; ++i) s += double{p[i]} * p[i];
    return std::sqrt(s / static_cast<double>(v.rows * v.cols));
  };
  const ModelWeights& w = ck->weights();
  EXPECT_NEAR(rms(w.embed_tokens), 1.0, 0.05);
  EXPECT_NEAR(rms(w.lm_head), 6.0 / 8.0, 0.05);
  EXPECT_NEAR(rms(w.layers[0].q_norm), 2.0, 0.1);
  EXPECT_NEAR(rms(w.layers[0].input_norm), 1.0, 0.05);
  EXPECT_NEAR(rms(w.layers[0].experts[0].down), 1.0 / std::sqrt(128.0), 0.01);
}

TEST_F(MakeModelTest, GateSkewReservesAConstantChannel) {
  MakeModelOptions o;
  o.gate_skew = 1.0;
  ASSERT_OK(MakeModel(o, dir_));
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_));
  const ModelWeights& w = ck->weights();
  const int64_t h = 64, j = 63;
  auto at = [](const WeightView& v, int64_t r, int64_t c) {
    return static_cast<const float*>(v.data)[r * v.cols + c];
  };
  for (int64_t t = 0; t < 512; t += 37) EXPECT_EQ(at(w.embed_tokens, t, j), kSkewChannelValue);
  for (int64_t c = 0; c < h; ++c) EXPECT_EQ(at(w.layers[1].o_proj, j, c), 0.0f);
  for (int64_t c = 0; c < 128; ++c) EXPECT_EQ(at(w.layers[0].experts[4].down, j, c), 0.0f);
  // Nothing but the routers reads the channel.
  for (int64_t r = 0; r < 64; ++r) EXPECT_EQ(at(w.layers[0].q_proj, r, j), 0.0f);
  for (int64_t r = 0; r < 32; ++r) EXPECT_EQ(at(w.layers[1].v_proj, r, j), 0.0f);
  for (int64_t r = 0; r < 128; ++r) EXPECT_EQ(at(w.layers[1].experts[2].gate, r, j), 0.0f);
  for (int64_t r = 0; r < 512; ++r) EXPECT_EQ(at(w.lm_head, r, j), 0.0f);
  // Router column j is -S ln(rank) / xhat: decreasing with rank, 0 for rank 1.
  std::vector<int64_t> rank = GateSkewRanks(o, 0);
  for (int64_t e = 0; e < 8; ++e) {
    for (int64_t f = 0; f < 8; ++f) {
      if (rank[e] < rank[f]) {
        EXPECT_GT(at(w.layers[0].router, e, j), at(w.layers[0].router, f, j));
      }
    }
  }
  // Ranks are a permutation, and differ between layers.
  std::vector<int64_t> sorted = rank;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_NE(GateSkewRanks(o, 0), GateSkewRanks(o, 1));
}

TEST_F(MakeModelTest, KvHeadsOverridesThePreset) {
  MakeModelOptions o;
  o.arch = Arch::kOlmoe;
  o.kv_heads = 4;
  ASSERT_OK(MakeModel(o, dir_));
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_));
  EXPECT_EQ(ck->config().num_key_value_heads, 4);
  EXPECT_EQ(ck->weights().layers[0].k_proj.rows, 64);
  EXPECT_EQ(ck->weights().layers[0].k_norm.cols, 64);
}

TEST_F(MakeModelTest, RejectsBadOptions) {
  EXPECT_THAT(ParsePreset("huge"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("huge")));
  MakeModelOptions o;
  o.gate_skew = -1;
  EXPECT_THAT(MakeModel(o, dir_), StatusIs(absl::StatusCode::kInvalidArgument));
  o.gate_skew = 0;
  o.kv_heads = 3;  // does not divide the 4 heads
  EXPECT_THAT(MakeModel(o, dir_), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::model
