#include "services/router/core/scheduler.h"

#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "common/base/check.h"
#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/testing/fake_model_runner.h"
#include "services/router/testing/scheduler_harness.h"

namespace moe::router {
namespace {

using ::moe::common::testing::FakeClock;
using ::moe::common::testing::IsOk;
using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::moe::generation::FinishReason;
using ::moe::router::testing::Collected;
using ::moe::router::testing::FakeModelRunner;
using ::moe::router::testing::FakeModelRunnerOptions;
using ::moe::router::testing::GreedyRequest;
using ::moe::router::testing::Poll;
using ::moe::router::testing::RunUntilIdle;
using ::testing::ElementsAreArray;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kVocab = 256;

std::vector<int32_t> Tokens(int n, int32_t seed) {
  std::vector<int32_t> out(n);
  for (int i = 0; i < n; ++i) out[i] = (seed * 131 + i * 17 + (i * i) % 7) % kVocab;
  return out;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens) {
  return FakeModelRunner::GreedyReference(kVocab, prompt, max_tokens);
}

// A scheduler over a fake runner, stepped by hand.
struct Harness {
  explicit Harness(SchedulerOptions options = {}, FakeModelRunnerOptions runner_options = {},
                   bool prefix_caching = true)
      : runner(runner_options) {
    auto blocks = testing::MakeBlockManager(runner, prefix_caching);
    MOE_CHECK_OK(blocks.status());
    auto created = Scheduler::Create(options, std::move(*blocks), runner, clock, metrics);
    MOE_CHECK_OK(created.status());
    scheduler = std::move(*created);
  }

  std::shared_ptr<RequestStream> Submit(GenerateRequest request) {
    auto submitted = scheduler->Submit(std::move(request));
    MOE_CHECK_OK(submitted.status());
    ids.push_back(submitted->seq_id);
    return submitted->stream;
  }

  // Runs until idle, reading every stream after each step (so no one is held back).
  std::vector<Collected> RunAll(const std::vector<std::shared_ptr<RequestStream>>& streams) {
    std::vector<Collected> out(streams.size());
    for (int steps = 0; scheduler->HasWork() && steps < 100000; ++steps) {
      scheduler->Step();
      for (size_t i = 0; i < streams.size(); ++i) Poll(*streams[i], &out[i]);
    }
    for (size_t i = 0; i < streams.size(); ++i) Poll(*streams[i], &out[i]);
    return out;
  }

  const kv::BlockManager& blocks() const { return scheduler->block_manager(); }

  FakeClock clock;
  FakeModelRunner runner;
  common::metrics::Registry registry;  // isolated: this harness's metrics only
  RouterMetrics metrics{registry, "m"};
  std::unique_ptr<Scheduler> scheduler;
  std::vector<common::SeqId> ids;
};

void ExpectAllBlocksReleased(const kv::BlockManager& blocks) {
  const kv::BlockManagerStats stats = blocks.GetStats();
  EXPECT_EQ(stats.num_blocks_used, 0) << blocks.DebugString();
  EXPECT_EQ(stats.num_sequences, 0);
  EXPECT_EQ(stats.num_blocks_free + stats.num_blocks_cached, stats.num_blocks_total);
  EXPECT_THAT(blocks.CheckInvariants(), IsOk());
}

TEST(SchedulerTest, GreedyOutputMatchesUnpagedReference) {
  Harness h;
  const auto prompt = Tokens(23, 1);
  auto stream = h.Submit(GreedyRequest(prompt, 12));
  auto out = h.RunAll({stream});
  EXPECT_THAT(out[0].token_ids, ElementsAreArray(Reference(prompt, 12)));
  EXPECT_EQ(out[0].finish_reason, FinishReason::kLength);
  EXPECT_THAT(out[0].status, IsOk());
  EXPECT_EQ(out[0].usage.prompt_tokens, 23);
  EXPECT_EQ(out[0].usage.completion_tokens, 12);
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, ConcurrentRequestsShareStepsAndKeepTheirOutput) {
  Harness h;
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(Tokens(5 + 3 * i, 10 + i));
    streams.push_back(h.Submit(GreedyRequest(prompts.back(), 9 + i)));
  }
  auto out = h.RunAll(streams);
  for (int i = 0; i < 8; ++i) {
    EXPECT_THAT(out[i].token_ids, ElementsAreArray(Reference(prompts[i], 9 + i))) << i;
  }
  EXPECT_EQ(h.runner.max_chunks_per_step(), 8);
  ExpectAllBlocksReleased(h.blocks());
}

// The Must-show: prefix sharing never changes output, for overlapping prompts run together
// and one after another.
TEST(SchedulerTest, PrefixCachingOnEqualsOffForOverlappingPrompts) {
  const auto system = Tokens(37, 3);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) prompts.push_back(Concat(system, Tokens(1 + 4 * i, 50 + i)));
  prompts.push_back(system);                         // the shared part alone
  prompts.push_back(Concat(system, Tokens(3, 50)));  // a prefix of prompt 0's
  prompts.push_back(std::vector<int32_t>(system.begin(), system.begin() + 32));  // block-aligned

  std::vector<std::vector<Collected>> results;
  std::vector<int64_t> computed;
  for (bool caching : {false, true}) {
    Harness h(SchedulerOptions{}, FakeModelRunnerOptions{}, caching);
    // Wave 1 together, wave 2 after wave 1 finished (hits blocks cached by wave 1).
    std::vector<std::shared_ptr<RequestStream>> wave1, wave2;
    for (size_t i = 0; i < prompts.size(); ++i)
      wave1.push_back(h.Submit(GreedyRequest(prompts[i], 10)));
    auto out1 = h.RunAll(wave1);
    for (size_t i = 0; i < prompts.size(); ++i)
      wave2.push_back(h.Submit(GreedyRequest(prompts[i], 10)));
    auto out2 = h.RunAll(wave2);
    out1.insert(out1.end(), out2.begin(), out2.end());
    results.push_back(out1);
    computed.push_back(h.runner.num_computed_tokens());
    ExpectAllBlocksReleased(h.blocks());
    int64_t cached = 0;
    for (const Collected& c : out2) cached += c.usage.cached_prompt_tokens;
    if (caching) {
      EXPECT_THAT(cached, Gt(0));
    } else {
      EXPECT_EQ(cached, 0);
    }
  }
  for (size_t i = 0; i < results[0].size(); ++i) {
    const auto& prompt = prompts[i % prompts.size()];
    EXPECT_THAT(results[0][i].token_ids, ElementsAreArray(Reference(prompt, 10))) << i;
    EXPECT_THAT(results[1][i].token_ids, ElementsAreArray(results[0][i].token_ids)) << i;
  }
  EXPECT_LT(computed[1], computed[0]);  // caching skipped prefill work
}

TEST(SchedulerTest, CachedPromptTokensAreReportedAndSkipped) {
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.kv_block_size = 4});
  const auto prompt = Tokens(30, 7);
  h.RunAll({h.Submit(GreedyRequest(prompt, 2))});
  const int64_t before = h.runner.num_computed_tokens();
  auto out = h.RunAll({h.Submit(GreedyRequest(Concat(prompt, Tokens(5, 8)), 2))});
  // 30 prompt tokens + the first generated token (computed in the decode step) were cached as
  // 7 full blocks of 4: 28 tokens.
  EXPECT_EQ(out[0].usage.cached_prompt_tokens, 28);
  EXPECT_EQ(h.runner.num_computed_tokens() - before, 35 - 28 + 1);
}

TEST(SchedulerTest, ChunkedPrefillMixesWithDecodes) {
  SchedulerOptions options;
  options.chunked_prefill_size = 8;
  options.max_batch_tokens = 9;
  Harness h(options);
  const auto short_prompt = Tokens(4, 1);
  const auto long_prompt = Tokens(60, 2);
  auto a = h.Submit(GreedyRequest(short_prompt, 20));
  h.scheduler->Step();  // a prefills alone
  auto b = h.Submit(GreedyRequest(long_prompt, 5));
  int mixed_steps = 0;
  std::vector<Collected> out(2);
  while (h.scheduler->HasWork()) {
    h.scheduler->Step();
    const SchedulerStats stats = h.scheduler->GetStats();
    EXPECT_LE(stats.last_step_tokens, 9);
    if (stats.last_step_seqs == 2 && stats.last_step_tokens == 9) ++mixed_steps;
    Poll(*a, &out[0]);
    Poll(*b, &out[1]);
  }
  EXPECT_GE(mixed_steps, 7);  // b's 60 tokens went in chunks of 8 beside a's decodes
  EXPECT_THAT(out[0].token_ids, ElementsAreArray(Reference(short_prompt, 20)));
  EXPECT_THAT(out[1].token_ids, ElementsAreArray(Reference(long_prompt, 5)));
}

TEST(SchedulerTest, TokenBudgetAndMaxNumSeqsBoundASstep) {
  SchedulerOptions options;
  options.max_num_seqs = 3;
  options.max_batch_tokens = 16;
  Harness h(options);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 6; ++i) streams.push_back(h.Submit(GreedyRequest(Tokens(10, i), 4)));
  h.scheduler->Step();
  SchedulerStats stats = h.scheduler->GetStats();
  EXPECT_EQ(stats.num_running, 2);  // 10 + 6 tokens fill the budget
  EXPECT_EQ(stats.last_step_tokens, 16);
  h.scheduler->Step();
  stats = h.scheduler->GetStats();
  EXPECT_EQ(stats.num_running, 3);
  EXPECT_EQ(stats.num_waiting, 3);
  auto out = h.RunAll(streams);
  for (int i = 0; i < 6; ++i)
    EXPECT_THAT(out[i].token_ids, ElementsAreArray(Reference(Tokens(10, i), 4)));
}

TEST(SchedulerTest, LowerPriorityValueIsAdmittedFirst) {
  SchedulerOptions options;
  options.max_num_seqs = 1;
  Harness h(options);
  GenerateRequest late = GreedyRequest(Tokens(6, 1), 2);
  late.priority = 5;
  GenerateRequest urgent = GreedyRequest(Tokens(6, 2), 2);
  urgent.priority = -1;
  auto s_late = h.Submit(late);
  auto s_urgent = h.Submit(urgent);
  h.scheduler->Step();
  Collected a, b;
  EXPECT_FALSE(Poll(*s_late, &a));
  EXPECT_THAT(a.token_ids, IsEmpty());
  Poll(*s_urgent, &b);
  EXPECT_EQ(b.token_ids.size(), 1u);
  GenerateRequest bad = GreedyRequest({1}, 1);
  bad.priority = 1001;
  EXPECT_THAT(h.scheduler->Submit(bad), StatusIs(absl::StatusCode::kInvalidArgument));
}

// request.h: a lower priority value is the last to be preempted. The urgent request arrives
// second (a higher seq id) so that an order by seq id alone would preempt it instead.
TEST(SchedulerTest, PreemptionTakesTheLowestPriorityFirst) {
  // 6 blocks of 4 slots: both 7-token prompts fit (2 blocks each), both grow into a third block,
  // and at position 12 the cache is dry: one of them must give its blocks back.
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.num_kv_blocks = 6, .kv_block_size = 4});
  GenerateRequest background = GreedyRequest(Tokens(7, 1), 12);
  background.priority = 5;
  GenerateRequest urgent = GreedyRequest(Tokens(7, 2), 12);
  urgent.priority = -1;
  auto s_background = h.Submit(background);
  auto s_urgent = h.Submit(urgent);
  const common::SeqId background_id = h.ids[0], urgent_id = h.ids[1];
  Collected out_background, out_urgent;
  for (int i = 0; i < 100 && h.scheduler->GetStats().num_preemptions == 0; ++i) {
    h.scheduler->Step();
    Poll(*s_background, &out_background);
    Poll(*s_urgent, &out_urgent);
  }
  ASSERT_EQ(h.scheduler->GetStats().num_preemptions, 1);
  EXPECT_TRUE(h.blocks().HasSequence(urgent_id)) << h.blocks().DebugString();
  EXPECT_FALSE(h.blocks().HasSequence(background_id)) << h.blocks().DebugString();
  EXPECT_GT(out_urgent.token_ids.size(), out_background.token_ids.size());
  // Preemption by recompute changes no output.
  auto rest = h.RunAll({s_background, s_urgent});
  out_background.token_ids.insert(out_background.token_ids.end(), rest[0].token_ids.begin(),
                                  rest[0].token_ids.end());
  out_urgent.token_ids.insert(out_urgent.token_ids.end(), rest[1].token_ids.begin(),
                              rest[1].token_ids.end());
  EXPECT_THAT(out_background.token_ids, ElementsAreArray(Reference(Tokens(7, 1), 12)));
  EXPECT_THAT(out_urgent.token_ids, ElementsAreArray(Reference(Tokens(7, 2), 12)));
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, LogprobsTravelWithTheirTokens) {
  Harness h;
  GenerateRequest r = GreedyRequest(Tokens(6, 1), 3);
  r.sampling.logprobs = 2;
  auto stream = h.Submit(r);
  RunUntilIdle(*h.scheduler);
  std::vector<engine::SampledToken> logprobs;
  while (auto event = stream->Next(absl::ZeroDuration())) {
    ASSERT_EQ(event->logprobs.size(), event->token_ids.size());
    logprobs.insert(logprobs.end(), event->logprobs.begin(), event->logprobs.end());
  }
  ASSERT_EQ(logprobs.size(), 3u);
  const auto ref = Reference(Tokens(6, 1), 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(logprobs[i].token_id, ref[i]);
    EXPECT_LE(logprobs[i].logprob, 0.0f);
    EXPECT_EQ(logprobs[i].top.size(), 2u);
  }
}

TEST(SchedulerTest, PreemptionByRecomputeKeepsOutputAndFreesEverything) {
  // 12 blocks of 4 slots; four requests of 10 + 20 tokens need 8 blocks each at the end.
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.num_kv_blocks = 12, .kv_block_size = 4});
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 4; ++i) {
    prompts.push_back(Tokens(10, 20 + i));
    streams.push_back(h.Submit(GreedyRequest(prompts.back(), 20)));
  }
  auto out = h.RunAll(streams);
  EXPECT_GT(h.scheduler->GetStats().num_preemptions, 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_THAT(out[i].token_ids, ElementsAreArray(Reference(prompts[i], 20))) << i;
    EXPECT_EQ(out[i].finish_reason, FinishReason::kLength);
    EXPECT_EQ(out[i].usage.completion_tokens, 20);
  }
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, PreemptionWithCachingOffAlsoKeepsOutput) {
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.num_kv_blocks = 10, .kv_block_size = 4},
            /*prefix_caching=*/false);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i) streams.push_back(h.Submit(GreedyRequest(Tokens(9, 40 + i), 18)));
  auto out = h.RunAll(streams);
  EXPECT_GT(h.scheduler->GetStats().num_preemptions, 0);
  for (int i = 0; i < 3; ++i) {
    EXPECT_THAT(out[i].token_ids, ElementsAreArray(Reference(Tokens(9, 40 + i), 18))) << i;
  }
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, SeededSamplingIsIndependentOfBatchingAndPreemption) {
  auto seeded = [](std::vector<int32_t> prompt) {
    GenerateRequest r = GreedyRequest(std::move(prompt), 16);
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = 1234;
    return r;
  };
  Harness alone;
  auto solo = alone.RunAll({alone.Submit(seeded(Tokens(11, 5)))});

  Harness crowd(SchedulerOptions{},
                FakeModelRunnerOptions{.num_kv_blocks = 14, .kv_block_size = 4});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 3; ++i)
    streams.push_back(crowd.Submit(GreedyRequest(Tokens(12, 60 + i), 16)));
  streams.push_back(crowd.Submit(seeded(Tokens(11, 5))));
  auto out = crowd.RunAll(streams);
  EXPECT_GT(crowd.scheduler->GetStats().num_preemptions, 0);
  EXPECT_THAT(out[3].token_ids, ElementsAreArray(solo[0].token_ids));
  EXPECT_EQ(out[3].token_ids.size(), 16u);
}

TEST(SchedulerTest, EvictedPrefixIsRecomputedWithSameOutput) {
  // 16 blocks of 4: later prompts evict the first prompt's cached blocks.
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.num_kv_blocks = 16, .kv_block_size = 4});
  const auto first = Tokens(24, 90);
  auto out_a = h.RunAll({h.Submit(GreedyRequest(first, 4))});
  for (int i = 0; i < 4; ++i) h.RunAll({h.Submit(GreedyRequest(Tokens(40, 100 + i), 4))});
  EXPECT_GT(h.blocks().GetStats().num_evictions, 0);
  auto out_b = h.RunAll({h.Submit(GreedyRequest(first, 4))});
  EXPECT_THAT(out_b[0].token_ids, ElementsAreArray(out_a[0].token_ids));
  EXPECT_THAT(out_a[0].token_ids, ElementsAreArray(Reference(first, 4)));
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, CancelFreesBlocksAtTheNextStepAndOthersContinue) {
  Harness h;
  const auto p0 = Tokens(20, 1), p1 = Tokens(20, 2);
  auto s0 = h.Submit(GreedyRequest(p0, 50));
  auto s1 = h.Submit(GreedyRequest(p1, 10));
  h.scheduler->Step();
  h.scheduler->Step();
  const int64_t used_before = h.blocks().GetStats().num_blocks_used;
  h.scheduler->Cancel(h.ids[0]);
  h.scheduler->Step();
  Collected c0;
  ASSERT_TRUE(Poll(*s0, &c0));
  EXPECT_EQ(c0.finish_reason, FinishReason::kAbort);
  EXPECT_THAT(c0.status, StatusIs(absl::StatusCode::kCancelled));
  EXPECT_THAT(c0.token_ids, ElementsAreArray(Reference(p0, 2)));
  auto info = h.blocks().GetSequenceInfo(kv::SeqId(h.ids[0]));
  EXPECT_THAT(info.status(), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_LT(h.blocks().GetStats().num_blocks_used, used_before);
  auto out = h.RunAll({s1});
  EXPECT_THAT(out[0].token_ids, ElementsAreArray(Reference(p1, 10)));
  ExpectAllBlocksReleased(h.blocks());
  h.scheduler->Cancel(h.ids[0]);  // finished ids are ignored
  h.scheduler->Step();
}

TEST(SchedulerTest, CancelWhileWaiting) {
  SchedulerOptions options;
  options.max_num_seqs = 1;
  Harness h(options);
  auto s0 = h.Submit(GreedyRequest(Tokens(8, 1), 3));
  auto s1 = h.Submit(GreedyRequest(Tokens(8, 2), 3));
  h.scheduler->Step();
  h.scheduler->Cancel(h.ids[1]);
  auto out = h.RunAll({s0, s1});
  EXPECT_EQ(out[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(out[1].finish_reason, FinishReason::kAbort);
  EXPECT_THAT(out[1].token_ids, IsEmpty());
  EXPECT_EQ(out[1].usage.completion_tokens, 0);
}

TEST(SchedulerTest, EngineErrorFailsTheStepsRequestsAndReleasesTheirBlocks) {
  Harness h;
  auto s0 = h.Submit(GreedyRequest(Tokens(9, 1), 5));
  auto s1 = h.Submit(GreedyRequest(Tokens(9, 2), 5));
  h.scheduler->Step();
  h.runner.FailNextSteps(1, absl::UnavailableError("expert worker gone"));
  h.scheduler->Step();
  auto out = h.RunAll({s0, s1});
  for (const Collected& c : out) {
    EXPECT_EQ(c.finish_reason, FinishReason::kError);
    EXPECT_THAT(c.status, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("expert worker")));
    EXPECT_EQ(c.token_ids.size(), 1u);
  }
  ExpectAllBlocksReleased(h.blocks());
  // A failed step's blocks were never registered: a new request computes and matches.
  auto again = h.RunAll({h.Submit(GreedyRequest(Tokens(9, 1), 5))});
  EXPECT_THAT(again[0].token_ids, ElementsAreArray(Reference(Tokens(9, 1), 5)));
}

TEST(SchedulerTest, DeadlineAbortsAndFrees) {
  Harness h;
  GenerateRequest request = GreedyRequest(Tokens(9, 1), 100);
  request.deadline = h.clock.Now() + absl::Seconds(1);
  auto stream = h.Submit(std::move(request));
  h.scheduler->Step();
  h.scheduler->Step();
  h.clock.Advance(absl::Seconds(2));
  h.scheduler->Step();
  Collected c;
  ASSERT_TRUE(Poll(*stream, &c));
  EXPECT_EQ(c.finish_reason, FinishReason::kAbort);
  EXPECT_THAT(c.status, StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(c.token_ids.size(), 2u);
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, StopTokenEosAndIgnoreEos) {
  const auto prompt = Tokens(10, 4);
  const auto ref = Reference(prompt, 8);
  {
    Harness h;
    GenerateRequest r = GreedyRequest(prompt, 8);
    r.sampling.stop_token_ids = {ref[2]};
    auto out = h.RunAll({h.Submit(r)});
    EXPECT_EQ(out[0].finish_reason, FinishReason::kStop);
    // Stops at the first occurrence (ref[2] may also appear earlier).
    const auto first = std::find(ref.begin(), ref.end(), ref[2]);
    EXPECT_THAT(out[0].token_ids, ElementsAreArray(ref.begin(), first + 1));
  }
  SchedulerOptions options;
  options.eos_token_ids = {ref[3]};
  {
    Harness h(options);
    auto out = h.RunAll({h.Submit(GreedyRequest(prompt, 8))});
    EXPECT_EQ(out[0].finish_reason, FinishReason::kStop);
    EXPECT_EQ(out[0].token_ids.back(), ref[3]);
  }
  {
    Harness h(options);
    GenerateRequest r = GreedyRequest(prompt, 8);
    r.sampling.ignore_eos = true;
    auto out = h.RunAll({h.Submit(r)});
    EXPECT_EQ(out[0].finish_reason, FinishReason::kLength);
    EXPECT_THAT(out[0].token_ids, ElementsAreArray(ref));
  }
}

TEST(SchedulerTest, ContextLengthEndsWithLength) {
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.max_context = 20});
  auto out = h.RunAll({h.Submit(GreedyRequest(Tokens(15, 1), 100))});
  EXPECT_EQ(out[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(out[0].token_ids.size(), 5u);
}

TEST(SchedulerTest, MaxTokensZeroPrefillsOnlyAndWarmsTheCache) {
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.kv_block_size = 4});
  const auto prompt = Tokens(17, 3);
  auto warm = h.RunAll({h.Submit(GreedyRequest(prompt, 0))});
  EXPECT_EQ(warm[0].finish_reason, FinishReason::kLength);
  EXPECT_THAT(warm[0].token_ids, IsEmpty());
  auto out = h.RunAll({h.Submit(GreedyRequest(prompt, 3))});
  EXPECT_EQ(out[0].usage.cached_prompt_tokens, 16);
  EXPECT_THAT(out[0].token_ids, ElementsAreArray(Reference(prompt, 3)));
}

TEST(SchedulerTest, SlowConsumerIsHeldBackNotBuffered) {
  SchedulerOptions options;
  options.stream_capacity = 2;
  Harness h(options);
  const auto prompt = Tokens(6, 1);
  auto stream = h.Submit(GreedyRequest(prompt, 6));
  for (int i = 0; i < 5; ++i) h.scheduler->Step();
  EXPECT_EQ(h.scheduler->GetStats().last_step_tokens, 0);  // held back
  Collected c;
  Poll(*stream, &c);
  EXPECT_EQ(c.token_ids.size(), 2u);
  auto rest = h.RunAll({stream});
  c.token_ids.insert(c.token_ids.end(), rest[0].token_ids.begin(), rest[0].token_ids.end());
  EXPECT_THAT(c.token_ids, ElementsAreArray(Reference(prompt, 6)));
}

TEST(SchedulerTest, BadInputIsInvalidArgument) {
  Harness h(SchedulerOptions{},
            FakeModelRunnerOptions{.max_context = 64, .num_kv_blocks = 8, .kv_block_size = 4});
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({}, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty")));
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({1, 256}, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("vocabulary")));
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({1, -1}, 4)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({1, 2}, -1)),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest(Tokens(64, 1), 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("context")));
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest(Tokens(40, 1), 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("KV blocks")));
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest(Tokens(32, 1), 0)), IsOk());
}

TEST(SchedulerTest, FullQueueIsResourceExhausted) {
  SchedulerOptions options;
  options.max_waiting = 2;
  Harness h(options);
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({1}, 1)), IsOk());
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({2}, 1)), IsOk());
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({3}, 1)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  h.scheduler->Step();  // both admitted: room again
  EXPECT_THAT(h.scheduler->Submit(GreedyRequest({3}, 1)), IsOk());
}

TEST(SchedulerTest, SequenceOutgrowingTheWholeCacheEndsWithError) {
  // 4 blocks of 4 = 16 slots; a 6-token prompt asking for 30 tokens cannot fit.
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.num_kv_blocks = 4, .kv_block_size = 4});
  auto out = h.RunAll({h.Submit(GreedyRequest(Tokens(6, 1), 30))});
  EXPECT_EQ(out[0].finish_reason, FinishReason::kError);
  EXPECT_THAT(out[0].status, StatusIs(absl::StatusCode::kResourceExhausted));
  EXPECT_EQ(out[0].token_ids.size(), 11u);  // 6 + 10 slots, the 11th has none
  ExpectAllBlocksReleased(h.blocks());
}

TEST(SchedulerTest, MetricsFollowTheDesignNames) {
  Harness h(SchedulerOptions{}, FakeModelRunnerOptions{.kv_block_size = 4});
  const auto prompt = Tokens(12, 1);
  h.RunAll({h.Submit(GreedyRequest(prompt, 3))});
  h.clock.Advance(absl::Seconds(1));
  h.RunAll({h.Submit(GreedyRequest(prompt, 3))});
  auto value = [&](const std::string& name, const common::metrics::Labels& labels) {
    auto v = h.registry.Value(name, labels);
    EXPECT_THAT(v.status(), IsOk()) << name;
    return v.ok() ? *v : -1.0;
  };
  const common::metrics::Labels model{{"model", "m"}};
  EXPECT_EQ(value("moe_requests_total", {{"model", "m"}, {"finish_reason", "length"}}), 2);
  EXPECT_EQ(value("moe_requests_total", {{"model", "m"}, {"finish_reason", "abort"}}), 0);
  EXPECT_EQ(value("moe_prompt_tokens_total", model), 24);
  EXPECT_EQ(value("moe_generation_tokens_total", model), 6);
  EXPECT_EQ(value("moe_cached_prompt_tokens_total", model), 8);
  EXPECT_EQ(value("moe_request_ttft_seconds", model), 2);
  EXPECT_EQ(value("moe_request_tpot_seconds", model), 2);
  EXPECT_EQ(value("moe_request_e2e_seconds", model), 2);
  EXPECT_EQ(value("moe_request_queue_seconds", model), 2);
  EXPECT_EQ(value("moe_requests_running", model), 0);
  EXPECT_EQ(value("moe_requests_waiting", model), 0);
  EXPECT_EQ(value("moe_prefix_cache_queries_total", {{"tier", "l1"}}), 4);  // 2 eligible blocks x2
  EXPECT_EQ(value("moe_prefix_cache_hits_total", {{"tier", "l1"}}), 2);
  EXPECT_EQ(value("moe_kv_usage_ratio", {{"tier", "l1"}}), 0);
  // The vLLM-named aliases are off by default (promtool check metrics rejects ':').
  EXPECT_THAT(h.registry.Value("vllm:num_requests_waiting", {{"model_name", "m"}}).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(SchedulerTest, VllmMetricAliasesWhenAsked) {
  FakeModelRunner runner(FakeModelRunnerOptions{.kv_block_size = 4});
  common::metrics::Registry registry;
  RouterMetrics metrics(registry, "m", /*vllm_aliases=*/true);
  auto blocks = testing::MakeBlockManager(runner, true);
  ASSERT_OK(blocks.status());
  FakeClock clock;
  ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Create(SchedulerOptions{}, std::move(*blocks),
                                                         runner, clock, metrics));
  ASSERT_OK(scheduler->Submit(GreedyRequest(Tokens(8, 1), 2)).status());
  scheduler->Step();
  EXPECT_THAT(registry.Value("vllm:num_requests_waiting", {{"model_name", "m"}}), IsOkAndHolds(0));
  auto usage = registry.Value("vllm:kv_cache_usage_perc", {{"model_name", "m"}});
  ASSERT_OK(usage.status());
  EXPECT_GT(*usage, 0);
  EXPECT_EQ(*usage, *registry.Value("moe_kv_usage_ratio", {{"tier", "l1"}}));
}

TEST(SchedulerTest, LoopThreadServesConcurrentSubmitters) {
  FakeModelRunner runner(FakeModelRunnerOptions{.num_kv_blocks = 40, .kv_block_size = 4});
  auto blocks = testing::MakeBlockManager(runner, true);
  ASSERT_OK(blocks.status());
  common::metrics::Registry registry;  // isolated
  RouterMetrics metrics(registry, "m");
  ASSERT_OK_AND_ASSIGN(auto scheduler,
                       Scheduler::Create(SchedulerOptions{}, std::move(*blocks), runner,
                                         common::SystemClock::Get(), metrics));
  ASSERT_OK(scheduler->Start());
  EXPECT_THAT(scheduler->Start(), StatusIs(absl::StatusCode::kFailedPrecondition));
  std::vector<std::thread> clients;
  std::vector<std::vector<int32_t>> got(8);
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      auto submitted = scheduler->Submit(GreedyRequest(Tokens(10 + i, i), 12));
      ASSERT_OK(submitted.status());
      got[i] = testing::ReadAll(*submitted->stream).token_ids;
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < 8; ++i) {
    EXPECT_THAT(got[i], ElementsAreArray(Reference(Tokens(10 + i, i), 12))) << i;
  }
  scheduler->Shutdown(absl::InfiniteFuture());
  EXPECT_THAT(scheduler->Submit(GreedyRequest({1}, 1)), StatusIs(absl::StatusCode::kUnavailable));
  ExpectAllBlocksReleased(scheduler->block_manager());
}

TEST(SchedulerTest, ShutdownAbortsWhatCannotFinish) {
  FakeModelRunner runner(FakeModelRunnerOptions{});
  auto blocks = testing::MakeBlockManager(runner, true);
  ASSERT_OK(blocks.status());
  SchedulerOptions options;
  options.stream_capacity = 1;
  common::metrics::Registry registry;  // isolated
  RouterMetrics metrics(registry, "m");
  ASSERT_OK_AND_ASSIGN(auto scheduler, Scheduler::Create(options, std::move(*blocks), runner,
                                                         common::SystemClock::Get(), metrics));
  ASSERT_OK(scheduler->Start());
  ASSERT_OK_AND_ASSIGN(auto submitted, scheduler->Submit(GreedyRequest(Tokens(5, 1), 100)));
  // Never read: the request is held back after one token and cannot finish.
  scheduler->Shutdown(absl::Now());
  Collected c = testing::ReadAll(*submitted.stream);
  EXPECT_EQ(c.finish_reason, FinishReason::kAbort);
  EXPECT_THAT(c.status, StatusIs(absl::StatusCode::kUnavailable));
  ExpectAllBlocksReleased(scheduler->block_manager());
}

}  // namespace
}  // namespace moe::router
