#include "common/engine/engine.h"

#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "common/engine/testing/random_model.h"
#include "common/engine/testing/test_seq.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using testing::SpanItem;

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;
using testing::MakeTinyRandomModel;
using testing::RandomModel;

using Seq = testing::TestSeq;

std::vector<int32_t> RandomTokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

class EngineTest : public ::testing::TestWithParam<std::tuple<model::Arch, common::DType>> {
 protected:
  void SetUp() override {
    model_ = MakeTinyRandomModel(std::get<0>(GetParam()), std::get<1>(GetParam()));
    EngineOptions o;
    o.num_threads = 2;
    o.block_size = 16;
    o.kv_num_blocks = 1024;
    o.max_batch_tokens = 2048;
    ASSERT_OK_AND_ASSIGN(engine_, Engine::Create(model_->config, model_->weights, o));
  }
  int64_t vocab() const { return model_->config.vocab_size; }

  // A sequence of `n` tokens owning the next free blocks (enough for `capacity` positions).
  Seq NewSeq(std::mt19937& rng, int64_t n, int64_t capacity = 256) {
    Seq s;
    s.tokens = RandomTokens(rng, n, vocab());
    for (int64_t b = 0; b < (capacity + 15) / 16; ++b) s.blocks.push_back(next_block_++);
    return s;
  }
  // Runs all of `s` in chunks of `chunk` tokens alone; returns the logits after every position.
  std::vector<float> RunChunked(const Seq& s, int64_t chunk) {
    std::vector<float> all;
    for (int64_t b = 0; b < static_cast<int64_t>(s.tokens.size()); b += chunk) {
      const int64_t e = std::min<int64_t>(b + chunk, s.tokens.size());
      StepItem it = SpanItem(s, b, e, LogitsMode::kAll);
      EXPECT_THAT(engine_->Step({&it, 1}, &out_), IsOk());
      all.insert(all.end(), out_.logits.begin(), out_.logits.begin() + (e - b) * vocab());
    }
    return all;
  }

  std::unique_ptr<RandomModel> model_;
  std::unique_ptr<Engine> engine_;
  StepOutput out_;
  int32_t next_block_ = 0;
};

bool BitwiseEqual(const float* a, const float* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(float)) == 0;
}

TEST_P(EngineTest, LogitsDoNotDependOnPrefillChunking) {
  std::mt19937 rng(7);
  Seq whole = NewSeq(rng, 40);
  const std::vector<float> ref = RunChunked(whole, 40);
  for (int64_t chunk : {1, 7, 16}) {
    Seq s = NewSeq(rng, 0);
    s.tokens = whole.tokens;
    const std::vector<float> got = RunChunked(s, chunk);
    ASSERT_EQ(got.size(), ref.size());
    EXPECT_TRUE(BitwiseEqual(got.data(), ref.data(), static_cast<int64_t>(ref.size())))
        << "chunk " << chunk;
  }
}

TEST_P(EngineTest, LogitsDoNotDependOnWhatElseIsInTheStep) {
  std::mt19937 rng(11);
  Seq target = NewSeq(rng, 33);
  const std::vector<float> ref = RunChunked(target, 33);
  // Decode reference: one more token alone.
  target.tokens.push_back(5);
  StepItem dec = SpanItem(target, 33, 34, LogitsMode::kLast);
  ASSERT_THAT(engine_->Step({&dec, 1}, &out_), IsOk());
  const std::vector<float> ref_dec(out_.logits.begin(), out_.logits.begin() + vocab());

  for (int others : {1, 2, 5, 17, 32}) {
    // Prefill: the target's whole prompt among `others` fresh sequences of random lengths.
    Seq t = NewSeq(rng, 0);
    t.tokens = target.tokens;
    std::vector<Seq> seqs;
    for (int i = 0; i < others; ++i) seqs.push_back(NewSeq(rng, 1 + rng() % 24));
    const size_t at = rng() % (others + 1);
    std::vector<StepItem> items;
    for (int i = 0; i < others; ++i) {
      if (static_cast<size_t>(i) == at) items.push_back(SpanItem(t, 0, 33, LogitsMode::kAll));
      items.push_back(SpanItem(seqs[i], 0, seqs[i].tokens.size(),
                               i % 3 == 0 ? LogitsMode::kAll : LogitsMode::kLast));
    }
    if (at == static_cast<size_t>(others)) items.push_back(SpanItem(t, 0, 33, LogitsMode::kAll));
    ASSERT_THAT(engine_->Step(items, &out_), IsOk());
    ASSERT_EQ(out_.num_rows(at), 33);
    EXPECT_TRUE(BitwiseEqual(out_.row(at, 0, vocab()), ref.data(), 33 * vocab()))
        << others << " others";

    // Decode: the target's next token among the others' next tokens.
    items.clear();
    for (Seq& s : seqs) s.tokens.push_back(static_cast<int32_t>(rng() % vocab()));
    for (int i = 0; i < others; ++i) {
      if (static_cast<size_t>(i) == at) items.push_back(SpanItem(t, 33, 34, LogitsMode::kLast));
      const int64_t n = seqs[i].tokens.size();
      items.push_back(SpanItem(seqs[i], n - 1, n, LogitsMode::kLast));
    }
    if (at == static_cast<size_t>(others)) items.push_back(SpanItem(t, 33, 34, LogitsMode::kLast));
    ASSERT_THAT(engine_->Step(items, &out_), IsOk());
    EXPECT_TRUE(BitwiseEqual(out_.row(at, 0, vocab()), ref_dec.data(), vocab()))
        << others << " others (decode)";
  }
}

TEST_P(EngineTest, PerturbingOneCachedBlockChangesLaterLogits) {
  std::mt19937 rng(3);
  Seq s = NewSeq(rng, 40);
  Seq unused = NewSeq(rng, 0);
  auto run_tail = [&](int32_t perturb_block, bool value) {
    StepItem head = SpanItem(s, 0, 32, LogitsMode::kNone);
    EXPECT_THAT(engine_->Step({&head, 1}, &out_), IsOk());
    if (perturb_block >= 0) {
      auto block = engine_->kv_cache().BlockForTesting(0, perturb_block, value);
      for (float& f : block) f += 0.5f;
    }
    StepItem tail = SpanItem(s, 32, 40, LogitsMode::kAll);
    EXPECT_THAT(engine_->Step({&tail, 1}, &out_), IsOk());
    return std::vector<float>(out_.logits.begin(), out_.logits.begin() + 8 * vocab());
  };
  const std::vector<float> clean = run_tail(-1, false);
  // A block outside the sequence's table changes nothing (bitwise).
  const std::vector<float> other = run_tail(unused.blocks[0], false);
  EXPECT_TRUE(BitwiseEqual(clean.data(), other.data(), 8 * vocab()));
  for (bool value : {false, true}) {
    const std::vector<float> dirty = run_tail(s.blocks[0], value);
    float max_diff = 0;
    for (size_t i = 0; i < clean.size(); ++i) {
      max_diff = std::max(max_diff, std::abs(clean[i] - dirty[i]));
    }
    EXPECT_GT(max_diff, 1e-2f) << (value ? "V" : "K");
  }
}

TEST_P(EngineTest, AnEarlyTokenChangesLaterLogitsClearly) {
  std::mt19937 rng(5);
  Seq a = NewSeq(rng, 24);
  Seq b = NewSeq(rng, 0);
  b.tokens = a.tokens;
  b.tokens[1] = (b.tokens[1] + 1) % vocab();
  const std::vector<float> la = RunChunked(a, 24), lb = RunChunked(b, 24);
  float max_diff = 0;
  for (int64_t i = 23 * vocab(); i < 24 * vocab(); ++i) {
    max_diff = std::max(max_diff, std::abs(la[i] - lb[i]));
  }
  EXPECT_GT(max_diff, 0.05f);
}

TEST_P(EngineTest, CountsTokensPerExpert) {
  std::mt19937 rng(9);
  Seq s = NewSeq(rng, 10);
  StepItem it = SpanItem(s, 0, 10, LogitsMode::kNone);
  ASSERT_THAT(engine_->Step({&it, 1}, &out_), IsOk());
  EXPECT_EQ(out_.num_rows(0), 0);
  const auto& c = model_->config;
  ASSERT_EQ(out_.expert_tokens.size(), static_cast<size_t>(c.num_hidden_layers * c.num_experts));
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    int64_t sum = 0;
    for (int64_t e = 0; e < c.num_experts; ++e) sum += out_.expert_tokens[l * c.num_experts + e];
    EXPECT_EQ(sum, 10 * c.num_experts_per_tok);
  }
}

TEST_P(EngineTest, RejectsBadItems) {
  std::mt19937 rng(1);
  Seq s = NewSeq(rng, 20, 16);  // one block only
  StepItem it = SpanItem(s, 0, 20, LogitsMode::kLast);
  EXPECT_THAT(engine_->Step({&it, 1}, &out_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block table")));
  s.blocks.push_back(100000);
  it = SpanItem(s, 0, 20, LogitsMode::kLast);
  EXPECT_THAT(engine_->Step({&it, 1}, &out_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block id")));
  s.blocks.back() = next_block_++;
  s.tokens[3] = static_cast<int32_t>(vocab());
  it = SpanItem(s, 0, 20, LogitsMode::kLast);
  EXPECT_THAT(engine_->Step({&it, 1}, &out_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocabulary")));
  it = SpanItem(s, 0, 0, LogitsMode::kLast);
  EXPECT_THAT(engine_->Step({&it, 1}, &out_), StatusIs(absl::StatusCode::kInvalidArgument));
}

std::string ParamName(
    const ::testing::TestParamInfo<std::tuple<model::Arch, common::DType>>& info) {
  static const char* const kArch[] = {"Mixtral", "Qwen2Moe", "Qwen3Moe", "Olmoe"};
  return std::string(kArch[static_cast<int>(std::get<0>(info.param))]) +
         (std::get<1>(info.param) == common::DType::kF32 ? "F32" : "BF16");
}

INSTANTIATE_TEST_SUITE_P(
    Archs, EngineTest,
    ::testing::Combine(::testing::Values(model::Arch::kMixtral, model::Arch::kQwen2Moe,
                                         model::Arch::kQwen3Moe, model::Arch::kOlmoe),
                       ::testing::Values(common::DType::kF32, common::DType::kBF16)),
    ParamName);

TEST(EngineOptionsTest, ValidateNamesTheField) {
  EngineOptions o;
  EXPECT_THAT(o.Validate(), IsOk());
  o.num_threads = 0;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_threads")));
  o = {};
  o.max_batch_tokens = 0;
  EXPECT_THAT(o.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("max_batch_tokens")));
  o = {};
  o.kv_cache_bytes = 0;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(EngineCreateTest, RejectsMissingWeights) {
  auto m = MakeTinyRandomModel(model::Arch::kQwen2Moe, common::DType::kF32);
  m->weights.layers[1].shared_expert_gate = {};
  EngineOptions o;
  EXPECT_THAT(
      Engine::Create(m->config, m->weights, o),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layers.1.shared_expert_gate")));
}

}  // namespace
}  // namespace moe::engine
