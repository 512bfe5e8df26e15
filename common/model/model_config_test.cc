#include "common/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/testing/status_matchers.h"

namespace moe::model {
namespace {

using common::DType;
using common::testing::StatusIs;
using ::testing::HasSubstr;

// The config.json files of the real checkpoints (Mixtral-8x7B-v0.1, Qwen1.5-MoE-A2.7B,
// Qwen3-30B-A3B, OLMoE-1B-7B-0924), as published.
constexpr char kMixtral[] = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})";

constexpr char kQwen2Moe[] = R"({
  "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
  "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24,
  "num_key_value_heads": 16, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.39.0.dev0", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
  "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
  "norm_topk_prob": false, "output_router_logits": false, "router_aux_loss_coef": 0.001})";

constexpr char kQwen3Moe[] = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
  "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
  "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
  "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
  "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
  "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})";

constexpr char kOlmoe[] = R"({
  "architectures": ["OlmoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "clip_qkv": null, "eos_token_id": 50279, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 1024, "max_position_embeddings": 4096,
  "model_type": "olmoe", "norm_topk_prob": false, "num_attention_heads": 16, "num_experts": 64,
  "num_experts_per_tok": 8, "num_hidden_layers": 16, "num_key_value_heads": 16,
  "output_router_logits": false, "pad_token_id": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": null, "rope_theta": 10000.0, "router_aux_loss_coef": 0.01,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.43.0.dev0", "use_cache": true, "vocab_size": 50304})";

TEST(ModelConfigTest, ParsesMixtral8x7B) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(kMixtral));
  EXPECT_EQ(c.arch, Arch::kMixtral);
  EXPECT_EQ(c.model_type, "mixtral");
  EXPECT_EQ(c.dtype, DType::kBF16);
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.num_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 2);
  EXPECT_EQ(c.moe_intermediate_size, 14336);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  for (int l = 0; l < 32; ++l) EXPECT_TRUE(c.IsMoeLayer(l));
}

TEST(ModelConfigTest, ParsesQwen15MoE) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(kQwen2Moe));
  EXPECT_EQ(c.arch, Arch::kQwen2Moe);
  EXPECT_EQ(c.num_experts, 60);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.moe_intermediate_size, 1408);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_TRUE(c.attention_bias);  // qkv_bias defaults to true
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.eos_token_id, 151643);
}

TEST(ModelConfigTest, ParsesQwen3MoE) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(kQwen3Moe));
  EXPECT_EQ(c.arch, Arch::kQwen3Moe);
  EXPECT_EQ(c.head_dim, 128);  // explicit; hidden/heads would be 64
  EXPECT_EQ(c.q_size(), 4096);
  EXPECT_EQ(c.kv_size(), 512);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.qk_norm_per_head);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.shared_expert_intermediate_size, 0);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_EQ(c.num_experts, 128);
}

TEST(ModelConfigTest, ParsesOlmoe) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(kOlmoe));
  EXPECT_EQ(c.arch, Arch::kOlmoe);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.qk_norm_per_head);
  EXPECT_EQ(c.moe_intermediate_size, 1024);  // OLMoE experts use intermediate_size
  EXPECT_EQ(c.num_experts, 64);
  EXPECT_FALSE(c.norm_topk_prob);
  EXPECT_EQ(c.clip_qkv, 0);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.pad_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 50279);
}

TEST(ModelConfigTest, AppliesClassDefaultsForMissingFields) {
  // Only the architecture: every size is the class default.
  ASSERT_OK_AND_ASSIGN(ModelConfig m,
                       ParseModelConfig(R"({"architectures":["MixtralForCausalLM"]})"));
  EXPECT_EQ(m.vocab_size, 32000);
  EXPECT_EQ(m.max_position_embeddings, 4096 * 32);
  EXPECT_EQ(m.num_experts, 8);
  EXPECT_EQ(m.dtype, DType::kF32);  // no torch_dtype: float32
  ASSERT_OK_AND_ASSIGN(ModelConfig q, ParseModelConfig(R"({"model_type":"qwen2_moe"})"));
  EXPECT_EQ(q.num_experts, 60);
  EXPECT_EQ(q.num_experts_per_tok, 4);
  EXPECT_EQ(q.shared_expert_intermediate_size, 5632);
  EXPECT_FALSE(q.norm_topk_prob);
  EXPECT_DOUBLE_EQ(q.rms_norm_eps, 1e-6);
  ASSERT_OK_AND_ASSIGN(ModelConfig o,
                       ParseModelConfig(R"({"architectures":["OlmoeForCausalLM"]})"));
  EXPECT_EQ(o.num_key_value_heads, o.num_attention_heads);  // None -> num_attention_heads
  EXPECT_EQ(o.eos_token_id, 50279);
  ASSERT_OK_AND_ASSIGN(ModelConfig q3,
                       ParseModelConfig(R"({"architectures":["Qwen3MoeForCausalLM"]})"));
  EXPECT_EQ(q3.num_experts, 128);
  EXPECT_EQ(q3.head_dim, 2048 / 32);
}

TEST(ModelConfigTest, SparseLayersFollowStepAndMlpOnlyLayers) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(R"({"architectures":["Qwen2MoeForCausalLM"],
      "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]})"));
  EXPECT_FALSE(c.IsMoeLayer(0));
  EXPECT_TRUE(c.IsMoeLayer(1));
  EXPECT_FALSE(c.IsMoeLayer(2));
  EXPECT_FALSE(c.IsMoeLayer(3));  // mlp_only_layers wins
  EXPECT_TRUE(c.IsMoeLayer(5));
}

TEST(ModelConfigTest, AcceptsV5SpellingsAndEosLists) {
  ASSERT_OK_AND_ASSIGN(ModelConfig c, ParseModelConfig(R"({"architectures":["Qwen3MoeForCausalLM"],
      "dtype": "float16", "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0},
      "eos_token_id": [7, 9]})"));
  EXPECT_EQ(c.dtype, DType::kF16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 5000.0);
  EXPECT_EQ(c.eos_token_id, 7);
  EXPECT_THAT(c.eos_token_ids, ::testing::ElementsAre(7, 9));
}

TEST(ModelConfigTest, RejectsUnknownArchitecture) {
  EXPECT_THAT(
      ParseModelConfig(R"({"architectures":["LlamaForCausalLM"]})", "/m/config.json"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::AllOf(HasSubstr("/m/config.json"), HasSubstr("LlamaForCausalLM"))));
  EXPECT_THAT(ParseModelConfig(R"({"model_type":"llama"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("llama")));
  EXPECT_THAT(ParseModelConfig(R"({"hidden_size": 4})"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ModelConfigTest, RejectsMalformedAndUnsupportedFields) {
  EXPECT_THAT(ParseModelConfig("{not json"), StatusIs(absl::StatusCode::kInvalidArgument));
  // Integral floats are integers; ones outside int64 are an error, not a wrapped value (fuzzer).
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["MixtralForCausalLM"],"hidden_size":1e30})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden_size")));
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["MixtralForCausalLM"],"hidden_size":"big"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden_size")));
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["MixtralForCausalLM"],"torch_dtype":"int8"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("torch_dtype")));
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["MixtralForCausalLM"],"hidden_act":"gelu"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden_act")));
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["OlmoeForCausalLM"],
                 "rope_scaling": {"type": "linear", "factor": 2.0}})"),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("linear")));
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["MixtralForCausalLM"],
                 "num_attention_heads": 6, "num_key_value_heads": 4, "hidden_size": 96})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_key_value_heads")));
  EXPECT_THAT(ParseModelConfig(R"({"architectures":["MixtralForCausalLM"],
                 "num_local_experts": 2, "num_experts_per_tok": 3})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_experts_per_tok")));
  EXPECT_THAT(
      ParseModelConfig(R"({"architectures":["MixtralForCausalLM"], "model_type": "olmoe"})"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("model_type")));
}

}  // namespace
}  // namespace moe::model
