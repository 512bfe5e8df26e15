#include "common/model/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/model/checkpoint_layout.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

using common::DType;
using common::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kQwen2Json[] = R"({"architectures": ["Qwen2MoeForCausalLM"],
  "model_type": "qwen2_moe", "vocab_size": 32, "hidden_size": 16, "intermediate_size": 24,
  "moe_intermediate_size": 8, "shared_expert_intermediate_size": 12, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "num_experts": 4,
  "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [1],
  "torch_dtype": "float32", "max_position_embeddings": 64})";

constexpr char kMixtralJson[] = R"({"architectures": ["MixtralForCausalLM"],
  "vocab_size": 32, "hidden_size": 16, "intermediate_size": 8, "num_hidden_layers": 2,
  "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4,
  "num_experts_per_tok": 2, "torch_dtype": "bfloat16", "tie_word_embeddings": true,
  "max_position_embeddings": 64})";

// Writes a checkpoint for `config_json`: tensor i of CheckpointTensors() is filled with the
// value i (in the config's dtype). `edit` may change the tensor list before writing (drop a
// tensor, change a shape or dtype); `shards` > 1 writes a sharded set with an index (shard s
// holds the s-th contiguous run of tensors).
void WriteCheckpoint(const std::string& dir, const std::string& config_json, int shards = 1,
                     const std::function<void(std::vector<TensorSpec>&)>& edit = nullptr) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << config_json;
  auto config = ParseModelConfig(config_json);
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<TensorSpec> specs;
  for (const TensorSlot& s : CheckpointTensors(*config)) {
    specs.push_back({s.name, config->dtype, s.shape});
  }
  if (edit) edit(specs);
  std::vector<std::vector<uint8_t>> data;
  for (size_t i = 0; i < specs.size(); ++i) {
    const int64_t n = specs[i].nbytes() / common::DTypeSize(specs[i].dtype);
    std::vector<uint8_t> bytes(specs[i].nbytes());
    for (int64_t k = 0; k < n; ++k) {
      const float v = static_cast<float>(i);
      if (specs[i].dtype == DType::kF32) {
        std::memcpy(bytes.data() + 4 * k, &v, 4);
      } else {
        uint16_t h = specs[i].dtype == DType::kBF16 ? common::F32ToBf16(v) : common::F32ToF16(v);
        std::memcpy(bytes.data() + 2 * k, &h, 2);
      }
    }
    data.push_back(std::move(bytes));
  }
  if (shards == 1) {
    std::vector<const void*> ptrs;
    for (auto& d : data) ptrs.push_back(d.data());
    ASSERT_OK(WriteSafetensors(dir + "/model.safetensors", specs, ptrs));
    return;
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < shards; ++s) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05d-of-%05d.safetensors", s + 1, shards);
    std::vector<TensorSpec> part;
    std::vector<const void*> ptrs;
    for (size_t i = s * specs.size() / shards; i < (s + 1) * specs.size() / shards; ++i) {
      part.push_back(specs[i]);
      ptrs.push_back(data[i].data());
      index["weight_map"][specs[i].name] = name;
    }
    ASSERT_OK(WriteSafetensors(dir + "/" + name, part, ptrs));
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
}

float First(const WeightView& v) {
  switch (v.dtype) {
    case DType::kF32:
      return *static_cast<const float*>(v.data);
    case DType::kBF16:
      return common::Bf16ToF32(*static_cast<const uint16_t*>(v.data));
    case DType::kF16:
      return common::F16ToF32(*static_cast<const uint16_t*>(v.data));
    case DType::kQ8_0:
      return common::Q8_0At(v.data, v.cols, 0, 0);
  }
  return 0;
}

// The index in CheckpointTensors() of the tensor called `name`.
float SlotIndex(const ModelConfig& c, const std::string& name) {
  auto slots = CheckpointTensors(c);
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i].name == name) return static_cast<float>(i);
  }
  return -1;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("checkpoint_test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(CheckpointTest, LoadsEveryTensorIntoTheRightView) {
  WriteCheckpoint(dir_, kQwen2Json);
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_));
  const ModelConfig& c = ck->config();
  const ModelWeights& w = ck->weights();
  ASSERT_EQ(w.layers.size(), 3u);
  EXPECT_EQ(First(w.embed_tokens), SlotIndex(c, "model.embed_tokens.weight"));
  EXPECT_EQ(w.embed_tokens.rows, 32);
  EXPECT_EQ(w.embed_tokens.cols, 16);
  EXPECT_EQ(First(w.lm_head), SlotIndex(c, "lm_head.weight"));
  EXPECT_EQ(First(w.final_norm), SlotIndex(c, "model.norm.weight"));
  EXPECT_EQ(w.final_norm.rows, 1);
  EXPECT_EQ(w.final_norm.cols, 16);
  const LayerWeights& l0 = w.layers[0];
  EXPECT_EQ(First(l0.q_bias), SlotIndex(c, "model.layers.0.self_attn.q_proj.bias"));
  EXPECT_EQ(l0.k_proj.rows, 8);  // 2 kv heads x head_dim 4
  EXPECT_EQ(First(l0.router), SlotIndex(c, "model.layers.0.mlp.gate.weight"));
  ASSERT_EQ(l0.experts.size(), 4u);
  EXPECT_EQ(First(l0.experts[3].down),
            SlotIndex(c, "model.layers.0.mlp.experts.3.down_proj.weight"));
  EXPECT_EQ(l0.experts[3].down.rows, 16);
  EXPECT_EQ(l0.experts[3].down.cols, 8);
  EXPECT_EQ(First(l0.shared_expert.up),
            SlotIndex(c, "model.layers.0.mlp.shared_expert.up_proj.weight"));
  EXPECT_EQ(l0.shared_expert_gate.rows, 1);
  EXPECT_EQ(l0.o_bias.data, nullptr);  // Qwen2-MoE: no o_proj bias
  // Layer 1 is dense (mlp_only_layers).
  const LayerWeights& l1 = w.layers[1];
  EXPECT_TRUE(l1.experts.empty());
  EXPECT_EQ(l1.router.data, nullptr);
  EXPECT_EQ(First(l1.dense_mlp.gate), SlotIndex(c, "model.layers.1.mlp.gate_proj.weight"));
  EXPECT_EQ(l1.dense_mlp.gate.rows, 24);
  EXPECT_GT(ck->loaded_bytes(), 0);
}

TEST_F(CheckpointTest, MixtralNamesBf16AndTiedEmbeddings) {
  WriteCheckpoint(dir_, kMixtralJson);
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_));
  const ModelConfig& c = ck->config();
  const ModelWeights& w = ck->weights();
  EXPECT_EQ(w.embed_tokens.dtype, DType::kBF16);
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);  // tied: no lm_head.weight in the file
  EXPECT_EQ(First(w.layers[1].experts[2].gate),
            SlotIndex(c, "model.layers.1.block_sparse_moe.experts.2.w1.weight"));
  EXPECT_EQ(First(w.layers[1].experts[2].up),
            SlotIndex(c, "model.layers.1.block_sparse_moe.experts.2.w3.weight"));
  EXPECT_EQ(First(w.layers[1].router), SlotIndex(c, "model.layers.1.block_sparse_moe.gate.weight"));
}

TEST_F(CheckpointTest, LoadsOnlyTheSelectedExperts) {
  WriteCheckpoint(dir_, kQwen2Json, /*shards=*/3);
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_, LoadOptions::OnlyExperts({{0, 1}, {2, 3}})));
  const ModelWeights& w = ck->weights();
  EXPECT_EQ(w.embed_tokens.data, nullptr);
  EXPECT_EQ(w.layers[0].q_proj.data, nullptr);
  EXPECT_EQ(w.layers[0].router.data, nullptr);
  EXPECT_EQ(w.layers[0].shared_expert.gate.data, nullptr);
  EXPECT_EQ(w.layers[0].experts[0].gate.data, nullptr);
  EXPECT_NE(w.layers[0].experts[1].gate.data, nullptr);
  EXPECT_NE(w.layers[2].experts[3].down.data, nullptr);
  EXPECT_EQ(First(w.layers[2].experts[3].down),
            SlotIndex(ck->config(), "model.layers.2.mlp.experts.3.down_proj.weight"));
  EXPECT_EQ(ck->loaded_bytes(), 2 * 3 * 8 * 16 * 4);

  ASSERT_OK_AND_ASSIGN(ExpertWeights e, ck->MapExpert(0, 2));
  EXPECT_EQ(First(e.up), SlotIndex(ck->config(), "model.layers.0.mlp.experts.2.up_proj.weight"));
  EXPECT_EQ(w.layers[0].experts[2].up.data, nullptr);  // weights() unchanged
  EXPECT_THAT(ck->MapExpert(1, 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an MoE layer")));
  EXPECT_THAT(ck->MapExpert(0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expert 4")));

  ASSERT_OK_AND_ASSIGN(auto dense, Checkpoint::Open(dir_, LoadOptions::DenseOnly()));
  EXPECT_NE(dense->weights().layers[0].router.data, nullptr);
  EXPECT_NE(dense->weights().layers[0].shared_expert.down.data, nullptr);
  EXPECT_EQ(dense->weights().layers[0].experts[0].gate.data, nullptr);
  EXPECT_NE(dense->weights().lm_head.data, nullptr);
}

TEST_F(CheckpointTest, ShardsHoldingNoSelectedTensorAreNotOpened) {
  WriteCheckpoint(dir_, kQwen2Json, /*shards=*/3);
  // Break the first shard (embeddings, layer 0); layer 2's experts live in the last one.
  std::filesystem::resize_file(dir_ + "/model-00001-of-00003.safetensors", 3);
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_, LoadOptions::OnlyExperts({{2, 3}})));
  EXPECT_THAT(ck->mapped_files(), ::testing::ElementsAre("model-00003-of-00003.safetensors"));
  EXPECT_NE(ck->weights().layers[2].experts[3].gate.data, nullptr);
  EXPECT_THAT(Checkpoint::Open(dir_), StatusIs(absl::StatusCode::kInvalidArgument,
                                               HasSubstr("model-00001-of-00003.safetensors")));
}

TEST_F(CheckpointTest, MissingTensorNamesFileAndTensor) {
  WriteCheckpoint(dir_, kQwen2Json, 1, [](std::vector<TensorSpec>& s) {
    std::erase_if(s, [](const TensorSpec& t) {
      return t.name == "model.layers.2.mlp.experts.1.up_proj.weight";
    });
  });
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("model.safetensors"),
                             HasSubstr("'model.layers.2.mlp.experts.1.up_proj.weight'"))));
  // A worker that does not need the missing expert loads fine.
  EXPECT_OK(Checkpoint::Open(dir_, LoadOptions::OnlyExperts({{2, 0}})));
}

TEST_F(CheckpointTest, WrongShapeNamesFileAndTensor) {
  WriteCheckpoint(dir_, kQwen2Json, 1, [](std::vector<TensorSpec>& s) {
    for (auto& t : s) {
      if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {16, 16};
    }
  });
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.safetensors"), HasSubstr("k_proj.weight"),
                             HasSubstr("shape [16, 16], expected [8, 16]"))));
}

TEST_F(CheckpointTest, WrongDtypeNamesFileAndTensor) {
  WriteCheckpoint(dir_, kQwen2Json, 1, [](std::vector<TensorSpec>& s) {
    for (auto& t : s) {
      if (t.name == "model.norm.weight") t.dtype = DType::kF16;
    }
  });
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("model.safetensors"), HasSubstr("'model.norm.weight'"),
                             HasSubstr("dtype F16, expected F32"))));
  LoadOptions lax;
  lax.strict_dtype = false;
  ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_, lax));
  EXPECT_EQ(ck->weights().final_norm.dtype, DType::kF16);
}

TEST_F(CheckpointTest, TruncatedShardFailsWithFileAndTensor) {
  WriteCheckpoint(dir_, kMixtralJson);
  const std::string path = dir_ + "/model.safetensors";
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("'"))));
}

TEST_F(CheckpointTest, UnknownArchitecture) {
  WriteCheckpoint(dir_, kMixtralJson);
  std::ofstream(dir_ + "/config.json") << R"({"architectures": ["GPT2LMHeadModel"]})";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("config.json"), HasSubstr("GPT2LMHeadModel"))));
}

TEST_F(CheckpointTest, BadIndexJson) {
  WriteCheckpoint(dir_, kQwen2Json, /*shards=*/2);
  const std::string index = dir_ + "/model.safetensors.index.json";
  std::ofstream(index) << "{\"weight_map\": ";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("index.json")));
  std::ofstream(index) << R"({"metadata": {}})";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("weight_map")));
  std::ofstream(index) << R"({"weight_map": {"model.embed_tokens.weight": 3}})";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model.embed_tokens.weight")));
  std::ofstream(index) << R"({"weight_map": {"model.embed_tokens.weight": "../x.safetensors"}})";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad file")));
  // A tensor the index does not list, and a shard the index names that does not exist.
  std::ofstream(index)
      << R"({"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}})";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr("index.json"), HasSubstr("missing tensor"))));
  std::ofstream(index) << R"({"weight_map": {"model.embed_tokens.weight": "gone.safetensors"}})";
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("gone.safetensors")));
  // An index pointing a tensor at a shard that does not hold it.
  nlohmann::json j;
  j["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  std::ofstream(index) << j.dump();
  EXPECT_THAT(Checkpoint::Open(dir_), StatusIs(absl::StatusCode::kNotFound,
                                               AllOf(HasSubstr("model-00002-of-00002.safetensors"),
                                                     HasSubstr("'model.embed_tokens.weight'"))));
}

TEST_F(CheckpointTest, NoWeightsAndBadOptions) {
  std::filesystem::create_directories(dir_);
  std::ofstream(dir_ + "/config.json") << kQwen2Json;
  EXPECT_THAT(Checkpoint::Open(dir_),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("model.safetensors")));
  WriteCheckpoint(dir_, kQwen2Json);
  EXPECT_THAT(Checkpoint::Open(dir_, LoadOptions::OnlyExperts({{1, 0}})),
              StatusIs(absl::StatusCode::kInvalidArgument));
  LoadOptions o;
  o.layers = {7};
  EXPECT_THAT(Checkpoint::Open(dir_, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer 7")));
  EXPECT_THAT(Checkpoint::Open(dir_ + "/nowhere"), StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace moe::model
