// Preemption and prefix eviction are exact on the real engine (issue 16 item 5): the scheduler over
// EngineModelRunner and the tiny preset, with a KV pool small enough that running sequences are
// preempted (by recompute) and cached prefix blocks are evicted, and small prefill chunks. Every
// greedy request gives the tokens it gives alone in a large pool. Each test also asserts that the
// pressure happened (num_preemptions / num_evictions), so none can pass vacuously. The scheduler is
// stepped on the test thread.
#include <memory>
#include <string>
#include <vector>

#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/core/router_core.h"
#include "services/router/testing/scheduler_harness.h"

namespace moe::router {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::router::testing::Collected;
using ::moe::router::testing::Poll;
using ::testing::ElementsAreArray;

struct PoolShape {
  int64_t num_blocks = 512;  // large: no pressure
  bool prefix_caching = true;
};

class EnginePreemptionTest : public ::testing::Test {
 protected:
  static constexpr int kBlockSize = 4;

  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("engine_preemption_test"));
    model::MakeModelOptions make;
    make.preset = model::Preset::kTiny;
    ASSERT_OK(model::MakeModel(make, *dir_));
  }
  static void TearDownTestSuite() { delete dir_; }

  // A router core over the real engine with `shape`'s pool, blocks of 4 tokens, prefill chunks of
  // at most 6 tokens and steps of at most 24 (chunked prefill always on).
  std::unique_ptr<RouterCore> MakeCore(PoolShape shape) {
    RouterCoreOptions options;
    options.model_dir = *dir_;
    options.model_name = "tiny";
    options.num_threads = 1;
    options.kv_num_blocks = shape.num_blocks;
    options.block_size = kBlockSize;
    options.enable_prefix_caching = shape.prefix_caching;
    options.scheduler.chunked_prefill_size = 6;
    options.scheduler.max_batch_tokens = 24;
    // A registry per core (outliving it): no series is shared between runs.
    registries_.push_back(std::make_unique<common::metrics::Registry>());
    auto core = RouterCore::Create(options, *registries_.back(), common::SystemClock::Get());
    EXPECT_THAT(core.status(), IsOk());
    return core.ok() ? std::move(*core) : nullptr;
  }

  static std::vector<int32_t> Tokens(int n, int32_t seed) {
    std::vector<int32_t> out(n);
    for (int i = 0; i < n; ++i) out[i] = 3 + (seed * 131 + i * 17 + (i * i) % 7) % 500;
    return out;
  }

  // Greedy, never stopping at EOS, so that each request holds its blocks to the end.
  static GenerateRequest Greedy(std::vector<int32_t> prompt, int32_t max_tokens) {
    GenerateRequest r = testing::GreedyRequest(std::move(prompt), max_tokens);
    r.sampling.ignore_eos = true;
    return r;
  }

  // Submits all at once, steps until idle reading every stream after each step.
  static std::vector<Collected> Run(RouterCore& core,
                                    const std::vector<GenerateRequest>& requests) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (const GenerateRequest& r : requests) {
      auto sub = core.scheduler().Submit(r);
      EXPECT_THAT(sub.status(), IsOk());
      if (!sub.ok()) return {};
      streams.push_back(sub->stream);
    }
    std::vector<Collected> out(streams.size());
    for (int steps = 0; core.scheduler().HasWork() && steps < 100000; ++steps) {
      core.scheduler().Step();
      for (size_t i = 0; i < streams.size(); ++i) Poll(*streams[i], &out[i]);
    }
    for (size_t i = 0; i < streams.size(); ++i) Poll(*streams[i], &out[i]);
    return out;
  }

  // Each request alone in a large pool: the reference.
  std::vector<std::vector<int32_t>> Unpressured(const std::vector<GenerateRequest>& requests) {
    std::unique_ptr<RouterCore> core = MakeCore(PoolShape{});
    std::vector<std::vector<int32_t>> out;
    for (const GenerateRequest& r : requests) {
      std::vector<Collected> got = Run(*core, {r});
      out.push_back(got.empty() ? std::vector<int32_t>{} : got[0].token_ids);
    }
    EXPECT_EQ(core->scheduler().GetStats().num_preemptions, 0);
    return out;
  }

  static void ExpectAllBlocksReleased(const kv::BlockManager& blocks) {
    const kv::BlockManagerStats stats = blocks.GetStats();
    EXPECT_EQ(stats.num_blocks_used, 0) << blocks.DebugString();
    EXPECT_EQ(stats.num_sequences, 0);
    EXPECT_EQ(stats.num_blocks_free + stats.num_blocks_cached, stats.num_blocks_total);
    EXPECT_THAT(blocks.CheckInvariants(), IsOk());
  }

  static void ExpectSameTokens(const std::vector<Collected>& got,
                               const std::vector<std::vector<int32_t>>& want, int32_t max_tokens) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_THAT(got[i].status, IsOk()) << i;
      EXPECT_EQ(got[i].finish_reason, generation::FinishReason::kLength) << i;
      ASSERT_EQ(want[i].size(), static_cast<size_t>(max_tokens)) << i;
      EXPECT_THAT(got[i].token_ids, ElementsAreArray(want[i])) << "request " << i;
    }
  }

  static std::string* dir_;
  std::vector<std::unique_ptr<common::metrics::Registry>> registries_;
};

std::string* EnginePreemptionTest::dir_ = nullptr;

TEST_F(EnginePreemptionTest, ConcurrentRequestsPreemptedByRecomputeKeepTheirTokens) {
  // 4 requests of 13 + 24 tokens need 10 blocks each at the end; the pool has 16.
  constexpr int32_t kMaxTokens = 24;
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 4; ++i) requests.push_back(Greedy(Tokens(13, 20 + i), kMaxTokens));
  const auto want = Unpressured(requests);

  std::unique_ptr<RouterCore> core = MakeCore(PoolShape{.num_blocks = 16});
  const std::vector<Collected> got = Run(*core, requests);
  EXPECT_GT(core->scheduler().GetStats().num_preemptions, 0);
  ExpectSameTokens(got, want, kMaxTokens);
  ExpectAllBlocksReleased(core->scheduler().block_manager());
}

TEST_F(EnginePreemptionTest, SharedPrefixUnderPreemptionKeepsTokens) {
  // A common 16-token prefix (4 full blocks shared through the prefix cache) and distinct tails:
  // preemption frees shared and private blocks, readmission finds the prefix again.
  constexpr int32_t kMaxTokens = 20;
  const std::vector<int32_t> prefix = Tokens(16, 7);
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> prompt = prefix;
    const std::vector<int32_t> tail = Tokens(3 + i, 40 + i);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    requests.push_back(Greedy(std::move(prompt), kMaxTokens));
  }
  const auto want = Unpressured(requests);

  std::unique_ptr<RouterCore> core = MakeCore(PoolShape{.num_blocks = 18});
  const std::vector<Collected> got = Run(*core, requests);
  const SchedulerStats stats = core->scheduler().GetStats();
  EXPECT_GT(stats.num_preemptions, 0);
  EXPECT_GT(stats.kv.prefix_cache_hits, 0);
  ExpectSameTokens(got, want, kMaxTokens);
  ExpectAllBlocksReleased(core->scheduler().block_manager());
}

TEST_F(EnginePreemptionTest, PreemptionWithPrefixCachingOffKeepsTokens) {
  constexpr int32_t kMaxTokens = 18;
  std::vector<GenerateRequest> requests;
  for (int i = 0; i < 3; ++i) requests.push_back(Greedy(Tokens(9, 60 + i), kMaxTokens));
  const auto want = Unpressured(requests);

  std::unique_ptr<RouterCore> core = MakeCore(PoolShape{.num_blocks = 10, .prefix_caching = false});
  const std::vector<Collected> got = Run(*core, requests);
  EXPECT_GT(core->scheduler().GetStats().num_preemptions, 0);
  ExpectSameTokens(got, want, kMaxTokens);
  ExpectAllBlocksReleased(core->scheduler().block_manager());
}

TEST_F(EnginePreemptionTest, EvictedPrefixIsRecomputedWithTheSameTokens) {
  // 16 blocks of 4: later prompts evict the first prompt's cached blocks; the first prompt then
  // runs again from a partly or wholly evicted prefix.
  constexpr int32_t kMaxTokens = 6;
  const GenerateRequest first = Greedy(Tokens(24, 90), kMaxTokens);
  const auto want = Unpressured({first});

  std::unique_ptr<RouterCore> core = MakeCore(PoolShape{.num_blocks = 16});
  const std::vector<Collected> a = Run(*core, {first});
  for (int i = 0; i < 4; ++i) Run(*core, {Greedy(Tokens(40, 100 + i), 4)});
  EXPECT_GT(core->scheduler().block_manager().GetStats().num_evictions, 0);
  const std::vector<Collected> b = Run(*core, {first});
  ExpectSameTokens(a, want, kMaxTokens);
  ExpectSameTokens(b, want, kMaxTokens);
  ExpectAllBlocksReleased(core->scheduler().block_manager());
}

}  // namespace
}  // namespace moe::router
