// Hundreds of concurrent random requests: overlapping prompts, tight KV (preemption and
// eviction), chunked prefill, cancellations, injected engine errors. Every request must end,
// every uncancelled successful one with the reference tokens, and the pool with no block held.
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/core/scheduler.h"
#include "services/router/testing/fake_model_runner.h"
#include "services/router/testing/scheduler_harness.h"

namespace moe::router {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::generation::FinishReason;
using ::moe::router::testing::Collected;
using ::moe::router::testing::FakeModelRunner;
using ::moe::router::testing::FakeModelRunnerOptions;
using ::testing::ElementsAreArray;
using ::testing::Gt;

constexpr int64_t kVocab = 256;

struct Case {
  std::vector<int32_t> prompt;
  int32_t max_tokens;
  std::shared_ptr<RequestStream> stream;
  common::SeqId id;
  bool cancelled = false;
  Collected out;
};

std::vector<int32_t> RandomPrompt(std::mt19937& rng,
                                  const std::vector<std::vector<int32_t>>& prefixes) {
  std::vector<int32_t> p;
  if (rng() % 4 != 0) p = prefixes[rng() % prefixes.size()];
  const int tail = 1 + static_cast<int>(rng() % 30);
  for (int i = 0; i < tail; ++i) p.push_back(static_cast<int32_t>(rng() % kVocab));
  return p;
}

void CheckOutcome(const Case& c) {
  ASSERT_NE(c.out.finish_reason, FinishReason::kNone);
  const auto ref = FakeModelRunner::GreedyReference(kVocab, c.prompt, c.max_tokens);
  // Whatever happened, the tokens produced are a prefix of the reference.
  ASSERT_LE(c.out.token_ids.size(), ref.size());
  EXPECT_THAT(c.out.token_ids, ElementsAreArray(ref.begin(), ref.begin() + c.out.token_ids.size()));
  if (c.out.finish_reason == FinishReason::kLength) {
    EXPECT_EQ(c.out.token_ids.size(), ref.size());
  }
  EXPECT_EQ(c.out.usage.completion_tokens, static_cast<int64_t>(c.out.token_ids.size()));
}

TEST(SchedulerStressTest, HundredsOfRandomRequestsEndWithEveryBlockFree) {
  std::mt19937 rng(42);
  std::vector<std::vector<int32_t>> prefixes;
  for (int i = 0; i < 5; ++i) {
    std::vector<int32_t> p(8 + rng() % 40);
    for (auto& t : p) t = static_cast<int32_t>(rng() % kVocab);
    prefixes.push_back(p);
  }
  FakeModelRunner runner(FakeModelRunnerOptions{.num_kv_blocks = 96, .kv_block_size = 4});
  auto blocks = testing::MakeBlockManager(runner, true);
  ASSERT_OK(blocks.status());
  SchedulerOptions options;
  options.max_num_seqs = 32;
  options.max_batch_tokens = 64;
  options.chunked_prefill_size = 16;
  options.max_waiting = 10000;
  common::metrics::Registry registry;  // isolated
  RouterMetrics metrics(registry, "m");
  ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Create(options, std::move(*blocks), runner,
                                                         common::SystemClock::Get(), metrics));
  std::vector<Case> cases;
  int errors = 0;
  for (int step = 0; step < 20000 && (cases.size() < 400 || scheduler->HasWork()); ++step) {
    if (cases.size() < 400) {
      for (int k = rng() % 4; k > 0; --k) {
        Case c;
        c.prompt = RandomPrompt(rng, prefixes);
        c.max_tokens = 1 + static_cast<int32_t>(rng() % 40);
        ASSERT_OK_AND_ASSIGN(SubmittedRequest s,
                             scheduler->Submit(testing::GreedyRequest(c.prompt, c.max_tokens)));
        c.stream = s.stream;
        c.id = s.seq_id;
        cases.push_back(std::move(c));
      }
    }
    if (!cases.empty() && rng() % 10 == 0) {
      Case& victim = cases[rng() % cases.size()];
      victim.cancelled = true;
      scheduler->Cancel(victim.id);
    }
    if (rng() % 200 == 0) {
      runner.FailNextSteps(1, absl::InternalError("injected"));
      ++errors;
    }
    scheduler->Step();
    ASSERT_THAT(scheduler->block_manager().CheckInvariants(), IsOk());
    for (Case& c : cases) testing::Poll(*c.stream, &c.out);
  }
  ASSERT_FALSE(scheduler->HasWork());
  std::map<FinishReason, int> reasons;
  for (const Case& c : cases) {
    CheckOutcome(c);
    ++reasons[c.out.finish_reason];
    if (!c.cancelled && c.out.finish_reason == FinishReason::kAbort) ADD_FAILURE() << "aborted";
  }
  EXPECT_EQ(cases.size(), 400u);
  EXPECT_THAT(reasons[FinishReason::kLength], Gt(200));
  EXPECT_THAT(reasons[FinishReason::kAbort], Gt(0));
  if (errors > 0) {
    EXPECT_THAT(reasons[FinishReason::kError], Gt(0));
  }
  const SchedulerStats stats = scheduler->GetStats();
  EXPECT_THAT(stats.num_preemptions, Gt(0));
  EXPECT_THAT(stats.kv.prefix_cache_hits, Gt(0));
  EXPECT_THAT(stats.kv.num_evictions, Gt(0));
  EXPECT_EQ(stats.kv.num_blocks_used, 0);
  EXPECT_EQ(stats.kv.num_sequences, 0);
  kv::BlockManager& bm = scheduler->mutable_block_manager();
  bm.ResetPrefixCache();
  EXPECT_EQ(bm.GetStats().num_blocks_free, bm.GetStats().num_blocks_total);
  EXPECT_THAT(bm.CheckInvariants(), IsOk());
}

TEST(SchedulerStressTest, ThreadedClientsWithTheLoopRunning) {
  FakeModelRunner runner(FakeModelRunnerOptions{.num_kv_blocks = 64, .kv_block_size = 4});
  auto blocks = testing::MakeBlockManager(runner, true);
  ASSERT_OK(blocks.status());
  SchedulerOptions options;
  options.max_batch_tokens = 48;
  options.chunked_prefill_size = 16;
  options.stream_capacity = 4;
  common::metrics::Registry registry;  // isolated
  RouterMetrics metrics(registry, "m");
  ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Create(options, std::move(*blocks), runner,
                                                         common::SystemClock::Get(), metrics));
  ASSERT_OK(scheduler->Start());
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::vector<Case>> per_thread(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      std::vector<std::vector<int32_t>> prefixes = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}};
      for (int i = 0; i < kPerThread; ++i) {
        Case c;
        c.prompt = RandomPrompt(rng, prefixes);
        c.max_tokens = 1 + static_cast<int32_t>(rng() % 20);
        auto s = scheduler->Submit(testing::GreedyRequest(c.prompt, c.max_tokens));
        if (!s.ok()) {
          ADD_FAILURE() << s.status();
          return;
        }
        c.id = s->seq_id;
        if (i % 7 == 3) {
          c.cancelled = true;
          scheduler->Cancel(c.id);
        }
        c.out = testing::ReadAll(*s->stream);
        per_thread[t].push_back(std::move(c));
      }
    });
  }
  for (auto& th : threads) th.join();
  scheduler->Shutdown(absl::InfiniteFuture());
  for (const auto& cases : per_thread) {
    ASSERT_EQ(cases.size(), static_cast<size_t>(kPerThread));
    for (const Case& c : cases) {
      CheckOutcome(c);
      if (!c.cancelled) {
        EXPECT_EQ(c.out.finish_reason, FinishReason::kLength);
      }
    }
  }
  const kv::BlockManagerStats stats = scheduler->block_manager().GetStats();
  EXPECT_EQ(stats.num_blocks_used, 0);
  EXPECT_EQ(stats.num_sequences, 0);
  EXPECT_THAT(scheduler->block_manager().CheckInvariants(), IsOk());
}

}  // namespace
}  // namespace moe::router
