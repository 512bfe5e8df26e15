#include "common/engine/generator.h"

#include <vector>

#include "common/engine/testing/random_model.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using ::moe::common::testing::StatusIs;
using ::moe::generation::FinishReason;
using ::testing::HasSubstr;

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testing::MakeTinyRandomModel(model::Arch::kQwen2Moe, common::DType::kF32);
    EngineOptions o;
    o.num_threads = 2;
    o.kv_num_blocks = 256;
    o.max_batch_tokens = 256;
    ASSERT_OK_AND_ASSIGN(engine_, Engine::Create(model_->config, model_->weights, o));
  }
  std::vector<GenerationResult> Run(const std::vector<GenerationRequest>& reqs,
                                    int64_t prefill_chunk = 512) {
    GeneratorOptions g;
    g.prefill_chunk = prefill_chunk;
    g.eos_token_ids = {0};  // rarely produced by the random model; the tests set stops explicitly
    Generator gen(engine_.get(), g);
    auto r = gen.Generate(reqs);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<GenerationResult>{};
  }
  static GenerationRequest Request(std::vector<int32_t> prompt, float temperature,
                                   int32_t max_tokens, std::optional<uint64_t> seed = {}) {
    GenerationRequest r;
    r.prompt_ids = std::move(prompt);
    r.sampling.temperature = temperature;
    r.sampling.max_tokens = max_tokens;
    r.sampling.seed = seed;
    r.sampling.ignore_eos = true;
    return r;
  }

  std::unique_ptr<testing::RandomModel> model_;
  std::unique_ptr<Engine> engine_;
};

TEST_F(GeneratorTest, GreedyAndSeededOutputsDoNotDependOnBatchOrChunking) {
  const GenerationRequest greedy = Request({1, 17, 33, 250, 9, 4, 77}, 0.0f, 12);
  const GenerationRequest seeded = Request({5, 6, 7}, 1.0f, 12, 1234);
  const auto alone_g = Run({greedy})[0];
  const auto alone_s = Run({seeded})[0];
  ASSERT_EQ(alone_g.output_ids.size(), 12u);
  std::vector<GenerationRequest> batch = {Request({3, 4}, 0.7f, 5, 1), seeded,
                                          Request({100, 101, 102, 103, 104}, 0.0f, 20), greedy,
                                          Request({8}, 1.0f, 3)};
  for (int64_t chunk : {1, 3, 512}) {
    const auto res = Run(batch, chunk);
    ASSERT_EQ(res.size(), batch.size());
    EXPECT_EQ(res[3].output_ids, alone_g.output_ids) << "chunk " << chunk;
    EXPECT_EQ(res[1].output_ids, alone_s.output_ids) << "chunk " << chunk;
  }
}

TEST_F(GeneratorTest, StopsAtStopTokenOrMaxTokens) {
  const auto free_run = Run({Request({1, 2, 3}, 0.0f, 8)})[0];
  ASSERT_EQ(free_run.output_ids.size(), 8u);
  EXPECT_EQ(free_run.finish_reason, FinishReason::kLength);
  GenerationRequest r = Request({1, 2, 3}, 0.0f, 8);
  r.sampling.stop_token_ids = {free_run.output_ids[2]};
  const auto stopped = Run({r})[0];
  // The stop token is the first occurrence of that id; it is included in the output.
  auto first =
      std::find(free_run.output_ids.begin(), free_run.output_ids.end(), free_run.output_ids[2]);
  EXPECT_EQ(stopped.output_ids, std::vector<int32_t>(free_run.output_ids.begin(), first + 1));
  EXPECT_EQ(stopped.finish_reason, FinishReason::kStop);
}

TEST_F(GeneratorTest, EosStopsUnlessIgnored) {
  const auto free_run = Run({Request({1, 2, 3}, 0.0f, 4)})[0];
  GeneratorOptions g;
  g.eos_token_ids = {free_run.output_ids[0]};
  Generator gen(engine_.get(), g);
  GenerationRequest r = Request({1, 2, 3}, 0.0f, 4);
  r.sampling.ignore_eos = false;
  ASSERT_OK_AND_ASSIGN(auto res, gen.Generate({&r, 1}));
  EXPECT_EQ(res[0].output_ids.size(), 1u);
  EXPECT_EQ(res[0].finish_reason, FinishReason::kStop);
}

TEST_F(GeneratorTest, PromptLogitsAllScoresEveryPositionAndMatchesLast) {
  GenerationRequest all = Request({1, 2, 3, 4, 5}, 0.0f, 0);
  all.prompt_logits = LogitsMode::kAll;
  GenerationRequest last = Request({1, 2, 3, 4, 5}, 0.0f, 1);
  last.prompt_logits = LogitsMode::kLast;
  const auto res = Run({all, last}, 2);
  const int64_t vocab = model_->config.vocab_size;
  ASSERT_EQ(res[0].prompt_logits.size(), static_cast<size_t>(5 * vocab));
  EXPECT_TRUE(res[0].output_ids.empty());
  ASSERT_EQ(res[1].prompt_logits.size(), static_cast<size_t>(vocab));
  EXPECT_TRUE(std::equal(res[1].prompt_logits.begin(), res[1].prompt_logits.end(),
                         res[0].prompt_logits.begin() + 4 * vocab));
  // The first token is the argmax of the last prompt logits.
  const auto& l = res[1].prompt_logits;
  EXPECT_EQ(res[1].output_ids[0], std::max_element(l.begin(), l.end()) - l.begin());
}

TEST_F(GeneratorTest, RejectsBadRequests) {
  Generator gen(engine_.get(), {});
  GenerationRequest empty;
  EXPECT_THAT(gen.Generate({&empty, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty prompt")));
  GenerationRequest bad = Request({1}, 0.0f, 1);
  bad.sampling.top_p = 2.0f;
  EXPECT_THAT(gen.Generate({&bad, 1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("top_p")));
}

TEST_F(GeneratorTest, ReportsAFullCache) {
  EngineOptions o;
  o.kv_num_blocks = 2;  // 32 positions
  ASSERT_OK_AND_ASSIGN(auto small, Engine::Create(model_->config, model_->weights, o));
  Generator gen(small.get(), {});
  GenerationRequest r = Request(std::vector<int32_t>(20, 1), 0.0f, 20);
  EXPECT_THAT(gen.Generate({&r, 1}), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace moe::engine
