// LoadOptions::weights = kQ8_0: which tensors are quantized on load, that each q8_0 element is
// its stored value to within half a quantum of its block's scale, the f16 scales, and that the
// quantized copies are owned (one per source tensor) and counted in loaded_bytes().
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/model/checkpoint.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "nlohmann/json.hpp"

namespace moe::model {
namespace {

using common::DType;

float StoredAt(const WeightView& v, int64_t r, int64_t c) {
  const int64_t i = r * v.cols + c;
  switch (v.dtype) {
    case DType::kF32:
      return static_cast<const float*>(v.data)[i];
    case DType::kBF16:
      return common::Bf16ToF32(static_cast<const uint16_t*>(v.data)[i]);
    case DType::kF16:
      return common::F16ToF32(static_cast<const uint16_t*>(v.data)[i]);
    case DType::kQ8_0:
      return common::Q8_0At(v.data, v.cols, r, c);
  }
  return 0;
}

// Every block of `q` against the stored `w`: its scale is f16(amax / 127), the element of
// largest magnitude becomes +-127, and every element is within half a quantum of its value.
void ExpectQuantizedFrom(const WeightView& q, const WeightView& w, const char* what) {
  ASSERT_EQ(q.dtype, DType::kQ8_0) << what;
  ASSERT_EQ(q.rows, w.rows) << what;
  ASSERT_EQ(q.cols, w.cols) << what;
  for (int64_t r = 0; r < w.rows; ++r) {
    const auto* row = static_cast<const uint8_t*>(q.data) + r * common::RowBytes(q.dtype, q.cols);
    for (int64_t b = 0; b < w.cols / common::kQ8BlockSize; ++b) {
      float amax = 0;
      int64_t at = 0;
      for (int64_t j = 0; j < common::kQ8BlockSize; ++j) {
        const float v = std::fabs(StoredAt(w, r, b * common::kQ8BlockSize + j));
        if (v > amax) amax = v, at = j;
      }
      uint16_t dbits;
      std::memcpy(&dbits, row + q.cols + 2 * b, 2);
      const float d = common::F16ToF32(dbits);
      ASSERT_EQ(dbits, common::F32ToF16(amax / 127.0f)) << what << " row " << r << " block " << b;
      if (amax == 0) continue;
      EXPECT_EQ(std::abs(static_cast<int8_t>(row[b * common::kQ8BlockSize + at])), 127)
          << what << " row " << r << " block " << b;
      for (int64_t j = 0; j < common::kQ8BlockSize; ++j) {
        const int64_t c = b * common::kQ8BlockSize + j;
        ASSERT_LE(std::fabs(StoredAt(q, r, c) - StoredAt(w, r, c)), 0.5f * d * (1 + 1e-6f))
            << what << " [" << r << ", " << c << "]";
      }
    }
  }
}

class CheckpointQ8Test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = common::testing::MakeTempDir("checkpoint_q8");
    MakeModelOptions o;
    o.preset = Preset::kTiny;
    o.arch = Arch::kQwen2Moe;  // shared expert, its gate, q/k/v biases: every kind of tensor
    o.dtype = DType::kBF16;
    ASSERT_OK(MakeModel(o, dir_));
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  static LoadOptions Q8(LoadOptions o = {}) {
    o.weights = WeightsMode::kQ8_0;
    o.quantize_threads = 2;
    return o;
  }
  std::string dir_;
};

TEST_F(CheckpointQ8Test, QuantizesTheProjectionsAndKeepsTheRestAsStored) {
  ASSERT_OK_AND_ASSIGN(auto stored, Checkpoint::Open(dir_));
  ASSERT_OK_AND_ASSIGN(auto q8, Checkpoint::Open(dir_, Q8()));
  const ModelWeights& s = stored->weights();
  const ModelWeights& q = q8->weights();
  ExpectQuantizedFrom(q.lm_head, s.lm_head, "lm_head");
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const LayerWeights& sl = s.layers[l];
    const LayerWeights& ql = q.layers[l];
    ExpectQuantizedFrom(ql.q_proj, sl.q_proj, "q_proj");
    ExpectQuantizedFrom(ql.k_proj, sl.k_proj, "k_proj");
    ExpectQuantizedFrom(ql.v_proj, sl.v_proj, "v_proj");
    ExpectQuantizedFrom(ql.o_proj, sl.o_proj, "o_proj");
    ExpectQuantizedFrom(ql.shared_expert.gate, sl.shared_expert.gate, "shared gate_proj");
    ExpectQuantizedFrom(ql.shared_expert.down, sl.shared_expert.down, "shared down_proj");
    for (size_t e = 0; e < sl.experts.size(); ++e) {
      ExpectQuantizedFrom(ql.experts[e].up, sl.experts[e].up, "expert up");
      ExpectQuantizedFrom(ql.experts[e].down, sl.experts[e].down, "expert down");
    }
    // As stored (the same mapped bytes): router gate, shared-expert gate, norms, biases.
    for (auto [a, b] :
         {std::pair{&ql.router, &sl.router},
          std::pair{&ql.shared_expert_gate, &sl.shared_expert_gate},
          std::pair{&ql.input_norm, &sl.input_norm}, std::pair{&ql.q_bias, &sl.q_bias}}) {
      EXPECT_EQ(a->dtype, DType::kBF16);
      EXPECT_EQ(std::memcmp(a->data, b->data, a->rows * a->cols * 2), 0);
    }
  }
  EXPECT_EQ(q.embed_tokens.dtype, DType::kBF16);
  EXPECT_LT(q8->loaded_bytes(), stored->loaded_bytes() * 6 / 10);  // ~1.06 vs 2 bytes/weight
}

TEST_F(CheckpointQ8Test, TiedEmbeddingsGetTheirOwnQuantizedLmHead) {
  // The same checkpoint read with tie_word_embeddings: lm_head.weight is then not bound.
  const std::string cfg = dir_ + "/config.json";
  std::ifstream in(cfg);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  j["tie_word_embeddings"] = true;
  std::ofstream(cfg) << j.dump();
  ASSERT_OK_AND_ASSIGN(auto stored, Checkpoint::Open(dir_));
  ASSERT_OK_AND_ASSIGN(auto q8, Checkpoint::Open(dir_, Q8()));
  EXPECT_EQ(stored->weights().lm_head.data, stored->weights().embed_tokens.data);
  EXPECT_EQ(q8->weights().embed_tokens.dtype, DType::kBF16);  // lookups stay exact
  ExpectQuantizedFrom(q8->weights().lm_head, stored->weights().embed_tokens, "tied lm_head");
}

TEST_F(CheckpointQ8Test, MappedExpertsAreQuantizedOnceEach) {
  ASSERT_OK_AND_ASSIGN(auto stored, Checkpoint::Open(dir_));
  ASSERT_OK_AND_ASSIGN(auto q8, Checkpoint::Open(dir_, Q8(LoadOptions::OnlyExperts({}))));
  ASSERT_OK_AND_ASSIGN(ExpertWeights e, q8->MapExpert(1, 2));
  ExpectQuantizedFrom(e.gate, stored->weights().layers[1].experts[2].gate, "mapped gate");
  ExpectQuantizedFrom(e.down, stored->weights().layers[1].experts[2].down, "mapped down");
  // An unload then load maps it again: the same copy, not a second one.
  ASSERT_OK_AND_ASSIGN(ExpertWeights again, q8->MapExpert(1, 2));
  EXPECT_EQ(again.gate.data, e.gate.data);
  EXPECT_EQ(again.down.data, e.down.data);
}

}  // namespace
}  // namespace moe::model
