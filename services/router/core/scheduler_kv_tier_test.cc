// The scheduler over a kv tier below L1 (kv_tier.h), with the fake runner (whose logits depend on
// the KV it reads, so a wrong fetched block changes the tokens) and the in-memory FakeKvTier:
// another router's prefix served from the tier, misses when it is down or slow, stores that
// never block, preemption offload, and the exact response cache. Fetches run on the scheduler's
// fetch threads: the "slow tier" tests hold them at the fake's latch and assert on steps.
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/base/check.h"
#include "common/metrics/registry.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "services/router/core/kv_fetcher.h"
#include "services/router/core/scheduler.h"
#include "services/router/testing/fake_kv_tier.h"
#include "services/router/testing/fake_model_runner.h"
#include "services/router/testing/scheduler_harness.h"

namespace moe::router {
namespace {

using ::moe::common::testing::FakeClock;
using ::moe::generation::FinishReason;
using ::moe::router::testing::Collected;
using ::moe::router::testing::FakeKvTier;
using ::moe::router::testing::FakeModelRunner;
using ::moe::router::testing::FakeModelRunnerOptions;
using ::moe::router::testing::GreedyRequest;
using ::moe::router::testing::Poll;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

constexpr int64_t kVocab = 256;
constexpr int64_t kBs = 4;

std::vector<int32_t> Tokens(int n, int32_t seed) {
  std::vector<int32_t> out(n);
  for (int i = 0; i < n; ++i) out[i] = (seed * 131 + i * 17 + (i * i) % 7) % kVocab;
  return out;
}

std::vector<int32_t> Reference(const std::vector<int32_t>& prompt, int max_tokens) {
  return FakeModelRunner::GreedyReference(kVocab, prompt, max_tokens);
}

// One router: a scheduler over its own fake runner (its L1), sharing `tier` with others.
struct Router {
  Router(KvTier& tier, SchedulerOptions options = {},
         FakeModelRunnerOptions runner_options = {.num_kv_blocks = 64, .kv_block_size = kBs})
      : runner(runner_options), metrics(registry, "fake") {
    auto blocks = testing::MakeBlockManager(runner, /*enable_prefix_caching=*/true);
    MOE_CHECK_OK(blocks.status());
    auto created = Scheduler::Create(options, std::move(*blocks), runner, tier, clock, metrics);
    MOE_CHECK_OK(created.status());
    scheduler = std::move(*created);
  }
  // Runs `requests` to the end, reading every stream after each step.
  std::vector<Collected> Run(std::vector<GenerateRequest> requests) {
    std::vector<std::shared_ptr<RequestStream>> streams;
    for (auto& r : requests) {
      auto s = scheduler->Submit(std::move(r));
      MOE_CHECK_OK(s.status());
      streams.push_back(s->stream);
    }
    std::vector<Collected> out(streams.size());
    for (int steps = 0; scheduler->HasWork() && steps < 100000; ++steps) {
      StepOrYield();
      for (size_t i = 0; i < streams.size(); ++i) Poll(*streams[i], &out[i]);
    }
    for (size_t i = 0; i < streams.size(); ++i) Poll(*streams[i], &out[i]);
    return out;
  }
  Collected Run(GenerateRequest r) {
    std::vector<GenerateRequest> v;
    v.push_back(std::move(r));
    return Run(std::move(v))[0];
  }
  // One step; when it computed nothing (a fetch is on its way, on a fetch thread), a short
  // sleep so that thread can run. Returns the tokens computed.
  int64_t StepOrYield() {
    const int64_t n = scheduler->Step();
    if (n == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
    return n;
  }
  // Steps until `done()` (at most 100000 tries; not timed).
  template <typename F>
  void StepUntil(F done) {
    for (int i = 0; i < 100000 && !done(); ++i) StepOrYield();
    MOE_CHECK(done());
  }
  std::shared_ptr<RequestStream> Submit(GenerateRequest r) {
    auto s = scheduler->Submit(std::move(r));
    MOE_CHECK_OK(s.status());
    ids.push_back(s->seq_id);
    return s->stream;
  }
  double Metric(const std::string& name, const common::metrics::Labels& labels = {}) {
    return registry.Value(name, labels).value_or(-1);
  }

  FakeClock clock;
  FakeModelRunner runner;
  common::metrics::Registry registry;
  RouterMetrics metrics;
  std::unique_ptr<Scheduler> scheduler;
  std::vector<common::SeqId> ids;  // of Submit, in order
};

TEST(SchedulerKvTierTest, RouterBServesThePrefixRouterAComputedWithTheSameTokens) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> prompt = Tokens(38, 1);  // 9 full blocks in the first 37 tokens
  const Collected first = a.Run(GreedyRequest(prompt, 12));
  EXPECT_THAT(first.token_ids, ElementsAreArray(Reference(prompt, 12)));
  EXPECT_EQ(first.usage.cached_prompt_tokens, 0);
  EXPECT_GE(tier.num_blocks(), 9);  // prompt blocks and the generated ones that filled

  const int64_t computed_before = b.runner.num_computed_tokens();
  const Collected second = b.Run(GreedyRequest(prompt, 12));
  EXPECT_THAT(second.token_ids, ElementsAreArray(first.token_ids));
  EXPECT_EQ(second.usage.cached_prompt_tokens, 9 * kBs);  // counted like an L1 hit
  // B prefilled only the last 2 prompt tokens, then decoded 11 more.
  EXPECT_EQ(b.runner.num_computed_tokens() - computed_before, 2 + 11);
  EXPECT_EQ(b.Metric("moe_prefix_cache_queries_total", {{"tier", "l2"}}), 9);
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l2"}}), 9);
  EXPECT_EQ(b.Metric("moe_cached_prompt_tokens_total", {{"model", "fake"}}), 9 * kBs);
  EXPECT_EQ(b.Metric("moe_stage_seconds", {{"stage", "kv_fetch"}}), 1);
}

// The stepping loop tells the tier when the engine turns busy and idle (once per change), so its
// write-behind can wait for the idle spells (kv_store_client.h put_idle_delay).
TEST(SchedulerKvTierTest, TheLoopTellsTheTierWhenTheEngineTurnsBusyAndIdle) {
  FakeKvTier tier(kBs * 8);
  Router r(tier);
  ASSERT_OK(r.scheduler->Start());
  for (int i = 0; i < 2; ++i) {
    const Collected c = testing::ReadAll(*r.Submit(GreedyRequest(Tokens(9, i), 5)));
    EXPECT_EQ(c.finish_reason, FinishReason::kLength);
    // The loop reports idle after the step that finished the request (not timed: polled).
    for (int k = 0; k < 100000 && tier.engine_busy_calls().size() < 2u * (i + 1); ++k) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
  EXPECT_THAT(tier.engine_busy_calls(), ElementsAre(true, false, true, false));
  r.scheduler->Shutdown(absl::InfiniteFuture());
}

TEST(SchedulerKvTierTest, GeneratedBlocksGoToTheTierOnlyWhenAskedFor) {
  const std::vector<int32_t> prompt = Tokens(10, 3);  // 2 full blocks, and 2 tokens of a third
  for (bool store_generated : {false, true}) {
    SCOPED_TRACE(store_generated);
    FakeKvTier tier(kBs * 8);
    SchedulerOptions o;
    o.store_generated_blocks = store_generated;
    Router a(tier, o);
    const Collected first = a.Run(GreedyRequest(prompt, 14));
    ASSERT_EQ(first.token_ids.size(), 14u);
    // 10 + 13 tokens computed (the last one sampled is never fed back): 5 full blocks, of which
    // the prompt fills 2.
    const int64_t stored = store_generated ? 5 : 2;
    EXPECT_EQ(tier.num_stored(), stored);
    EXPECT_EQ(tier.num_blocks(), stored);

    // The next turn on another router: its prompt is the whole conversation so far.
    std::vector<int32_t> next = prompt;
    next.insert(next.end(), first.token_ids.begin(), first.token_ids.end());
    Router b(tier);
    const Collected second = b.Run(GreedyRequest(next, 3));
    EXPECT_THAT(second.token_ids, ElementsAreArray(Reference(next, 3)));
    EXPECT_EQ(second.usage.cached_prompt_tokens, stored * kBs);
    // Off, b stores the answer's blocks now, as prompt blocks of the next turn.
    EXPECT_EQ(tier.num_blocks(), 6);
  }
}

TEST(SchedulerKvTierTest, L1HitsFirstThenTheTierForTheRest) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> doc = Tokens(24, 2);
  std::vector<int32_t> longer = doc;
  for (int32_t t : Tokens(17, 3)) longer.push_back(t);
  a.Run(GreedyRequest(longer, 4));  // the tier has all 10 blocks
  b.Run(GreedyRequest(doc, 4));     // B's L1 now holds doc's 6 blocks (5 fetched, 1 computed)
  const Collected c = b.Run(GreedyRequest(longer, 6));
  EXPECT_THAT(c.token_ids, ElementsAreArray(Reference(longer, 6)));
  EXPECT_EQ(c.usage.cached_prompt_tokens, 10 * kBs);
  // The second request found 6 blocks in L1: only the other 4 were asked of the tier.
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l1"}}), 6);
  EXPECT_EQ(b.Metric("moe_prefix_cache_queries_total", {{"tier", "l2"}}), 5 + 4);
}

// A miss too small to pay for a round trip is prefilled: with 1 ms per token measured, a fetch
// starts only when the blocks L1 missed would take kv_fetch_min_saving (5 ms) to prefill.
TEST(SchedulerKvTierTest, MissesTooSmallToPayForAFetchArePrefilled) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  b.runner.AdvanceClockOnStep(&b.clock, absl::Milliseconds(1));
  const std::vector<int32_t> doc = Tokens(41, 2);
  a.Run(GreedyRequest(doc, 4));  // the tier has doc's 10 blocks
  // Before any estimate every miss is fetched (this one finds nothing in the tier).
  b.Run(GreedyRequest(Tokens(40, 9), 2));
  EXPECT_EQ(b.Metric("moe_stage_seconds", {{"stage", "kv_fetch"}}), 1);

  // 2 blocks missed = 8 ms of prefill: fetched.
  const std::vector<int32_t> nine(doc.begin(), doc.begin() + 9);
  const Collected fetched = b.Run(GreedyRequest(nine, 3));
  EXPECT_THAT(fetched.token_ids, ElementsAreArray(Reference(nine, 3)));
  EXPECT_EQ(fetched.usage.cached_prompt_tokens, 2 * kBs);
  EXPECT_EQ(b.Metric("moe_stage_seconds", {{"stage", "kv_fetch"}}), 2);

  // L1 now has those 2; the third block missed = 4 ms: prefilled, no fetch.
  const std::vector<int32_t> thirteen(doc.begin(), doc.begin() + 13);
  const int64_t computed_before = b.runner.num_computed_tokens();
  const Collected prefilled = b.Run(GreedyRequest(thirteen, 3));
  EXPECT_THAT(prefilled.token_ids, ElementsAreArray(Reference(thirteen, 3)));
  EXPECT_EQ(prefilled.usage.cached_prompt_tokens, 2 * kBs);
  EXPECT_EQ(b.Metric("moe_stage_seconds", {{"stage", "kv_fetch"}}), 2);
  EXPECT_EQ(b.runner.num_computed_tokens() - computed_before, (13 - 2 * kBs) + 2);
}

TEST(SchedulerKvTierTest, OnEqualsOffForManyOverlappingPrompts) {
  FakeKvTier tier(kBs * 8);
  Router on(tier);
  NoKvTier none;
  Router off(none);
  std::vector<GenerateRequest> requests_on, requests_off;
  const std::vector<int32_t> shared = Tokens(20, 5);
  for (int i = 0; i < 12; ++i) {
    std::vector<int32_t> p = shared;
    for (int32_t t : Tokens(3 + i, 10 + i)) p.push_back(t);
    if (i % 3 == 0) p = Tokens(9 + i, 40 + i);
    requests_on.push_back(GreedyRequest(p, 9));
    requests_off.push_back(GreedyRequest(p, 9));
  }
  const auto out_on = on.Run(std::move(requests_on));
  const auto out_off = off.Run(std::move(requests_off));
  for (size_t i = 0; i < out_on.size(); ++i) {
    EXPECT_THAT(out_on[i].token_ids, ElementsAreArray(out_off[i].token_ids)) << i;
  }
}

TEST(SchedulerKvTierTest, ADownTierMeansMissesNeverFailures) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> prompt = Tokens(30, 6);
  a.Run(GreedyRequest(prompt, 5));
  tier.set_available(false);
  const Collected c = b.Run(GreedyRequest(prompt, 5));
  EXPECT_EQ(c.finish_reason, FinishReason::kLength);
  EXPECT_THAT(c.token_ids, ElementsAreArray(Reference(prompt, 5)));
  EXPECT_EQ(c.usage.cached_prompt_tokens, 0);
  EXPECT_GT(tier.num_dropped(), 0);  // B's own stores went nowhere
  tier.set_available(true);          // back: hits resume
  Router d(tier);
  EXPECT_EQ(d.Run(GreedyRequest(prompt, 5)).usage.cached_prompt_tokens, 7 * kBs);
}

TEST(SchedulerKvTierTest, AFetchCutShortByItsDeadlineServesWhatArrived) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> prompt = Tokens(41, 7);
  a.Run(GreedyRequest(prompt, 6));
  tier.set_max_fetch_blocks(3);
  const Collected c = b.Run(GreedyRequest(prompt, 6));
  EXPECT_THAT(c.token_ids, ElementsAreArray(Reference(prompt, 6)));
  EXPECT_EQ(c.usage.cached_prompt_tokens, 3 * kBs);
}

TEST(SchedulerKvTierTest, ABlockThatFailsVerificationIsRecomputed) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> prompt = Tokens(33, 8);
  a.Run(GreedyRequest(prompt, 6));
  std::vector<kv::BlockHash> chain = b.scheduler->block_manager().ChainHashes(prompt);
  tier.Corrupt(chain[4]);  // its bytes arrive (written into B's L1 page) but are not counted
  const Collected c = b.Run(GreedyRequest(prompt, 6));
  EXPECT_THAT(c.token_ids, ElementsAreArray(Reference(prompt, 6)));
  EXPECT_EQ(c.usage.cached_prompt_tokens, 4 * kBs);
}

TEST(SchedulerKvTierTest, L3HitsAreCountedAsL3) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> prompt = Tokens(21, 9);
  a.Run(GreedyRequest(prompt, 2));
  const std::vector<kv::BlockHash> chain = a.scheduler->block_manager().ChainHashes(prompt);
  for (int i = 2; i < 5; ++i) tier.MoveToL3(chain[i]);
  EXPECT_EQ(b.Run(GreedyRequest(prompt, 2)).usage.cached_prompt_tokens, 5 * kBs);
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l2"}}), 2);
  EXPECT_EQ(b.Metric("moe_prefix_cache_queries_total", {{"tier", "l3"}}), 3);
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l3"}}), 3);
}

TEST(SchedulerKvTierTest, AFullStoreQueueDropsAndNeverBlocks) {
  FakeKvTier tier(kBs * 8);
  tier.set_store_capacity(0);
  Router a(tier);
  const std::vector<int32_t> prompt = Tokens(30, 10);
  const Collected c = a.Run(GreedyRequest(prompt, 8));
  EXPECT_THAT(c.token_ids, ElementsAreArray(Reference(prompt, 8)));
  EXPECT_EQ(tier.num_blocks(), 0);
  EXPECT_GT(tier.num_dropped(), 0);
  // Two blocks per step fit: the blocks not stored yet go on the next steps.
  tier.set_store_capacity(2);
  Router b(tier);
  b.Run(GreedyRequest(prompt, 8));
  for (const kv::BlockHash& h : b.scheduler->block_manager().ChainHashes(prompt)) {
    EXPECT_TRUE(tier.Contains(h));
  }
}

TEST(SchedulerKvTierTest, OffloadedPreemptedSequencesComeBackFromTheTier) {
  // 12 blocks of 4 slots: four requests of 10 + 20 tokens preempt each other.
  for (PreemptionMode mode : {PreemptionMode::kRecompute, PreemptionMode::kOffload}) {
    FakeKvTier tier(kBs * 8);
    SchedulerOptions o;
    o.preemption_mode = mode;
    Router r(tier, o, FakeModelRunnerOptions{.num_kv_blocks = 12, .kv_block_size = kBs});
    std::vector<GenerateRequest> requests;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) {
      prompts.push_back(Tokens(10, 20 + i));
      requests.push_back(GreedyRequest(prompts.back(), 20));
    }
    const auto out = r.Run(std::move(requests));
    EXPECT_GT(r.scheduler->GetStats().num_preemptions, 0);
    for (int i = 0; i < 4; ++i) {
      EXPECT_THAT(out[i].token_ids, ElementsAreArray(Reference(prompts[i], 20))) << i;
    }
    if (mode == PreemptionMode::kOffload) {
      EXPECT_GT(tier.num_fetched(), 0);  // re-admissions were served by the tier
    } else {
      EXPECT_EQ(tier.num_fetched(), 0);  // recompute means recompute
    }
  }
}

GenerateRequest Seeded(std::vector<int32_t> prompt, int max_tokens, uint64_t seed) {
  GenerateRequest r = GreedyRequest(std::move(prompt), max_tokens);
  r.sampling.temperature = 0.8f;
  r.sampling.seed = seed;
  return r;
}

TEST(SchedulerKvTierTest, ResponseCacheAnswersARepeatWithoutComputeAndTheSameChunks) {
  FakeKvTier tier(kBs * 8);
  tier.set_response_cache(true);
  Router a(tier), b(tier);
  const std::vector<int32_t> prompt = Tokens(14, 11);
  GenerateRequest r = GreedyRequest(prompt, 7);
  r.sampling.logprobs = 2;
  const Collected first = a.Run(r);
  EXPECT_FALSE(first.usage.from_response_cache);
  EXPECT_EQ(tier.num_responses(), 1);

  const int64_t steps = b.runner.num_steps();
  auto submitted = b.scheduler->Submit(r);
  ASSERT_TRUE(submitted.ok());
  EXPECT_TRUE(submitted->stream->finished());  // answered by Submit itself
  Collected second;
  EXPECT_TRUE(Poll(*submitted->stream, &second));
  EXPECT_EQ(b.runner.num_steps(), steps);  // no compute
  EXPECT_THAT(second.token_ids, ElementsAreArray(first.token_ids));
  EXPECT_EQ(second.finish_reason, first.finish_reason);
  EXPECT_TRUE(second.usage.from_response_cache);
  EXPECT_EQ(second.usage.prompt_tokens, 14);
  EXPECT_EQ(second.usage.completion_tokens, 7);
  EXPECT_EQ(second.usage.cached_prompt_tokens, 14);
  EXPECT_EQ(b.Metric("moe_response_cache_hits_total"), 1);
  EXPECT_EQ(b.Metric("moe_requests_total", {{"model", "fake"}, {"finish_reason", "length"}}), 1);
}

TEST(SchedulerKvTierTest, ResponseCacheKeysOnEveryParameterAndSkipsUnseededSampling) {
  FakeKvTier tier(kBs * 8);
  tier.set_response_cache(true);
  Router a(tier);
  const std::vector<int32_t> prompt = Tokens(10, 12);
  a.Run(GreedyRequest(prompt, 5));
  EXPECT_TRUE(a.Run(GreedyRequest(prompt, 5)).usage.from_response_cache);
  EXPECT_FALSE(a.Run(GreedyRequest(prompt, 6)).usage.from_response_cache);  // max_tokens
  GenerateRequest salted = GreedyRequest(prompt, 5);
  salted.cache_salt = "tenant";
  EXPECT_FALSE(a.Run(salted).usage.from_response_cache);
  // Seeded sampling: cached per seed.
  const Collected s1 = a.Run(Seeded(prompt, 5, 42));
  const Collected s2 = a.Run(Seeded(prompt, 5, 42));
  EXPECT_TRUE(s2.usage.from_response_cache);
  EXPECT_THAT(s2.token_ids, ElementsAreArray(s1.token_ids));
  EXPECT_FALSE(a.Run(Seeded(prompt, 5, 43)).usage.from_response_cache);
  // Unseeded sampling never asks.
  const int64_t lookups = tier.num_response_lookups();
  GenerateRequest unseeded = GreedyRequest(prompt, 5);
  unseeded.sampling.temperature = 0.8f;
  a.Run(unseeded);
  a.Run(unseeded);
  EXPECT_EQ(tier.num_response_lookups(), lookups);
}

TEST(SchedulerKvTierTest, ResponseCacheIsOffUnlessTheTierEnablesIt) {
  FakeKvTier tier(kBs * 8);
  Router a(tier);
  const std::vector<int32_t> prompt = Tokens(10, 13);
  a.Run(GreedyRequest(prompt, 5));
  EXPECT_FALSE(a.Run(GreedyRequest(prompt, 5)).usage.from_response_cache);
  EXPECT_EQ(tier.num_response_lookups(), 0);
}

// ---------------------------------------------------------------------------------------------
// Asynchronous fetch: a slow tier (the fake's latch) stalls only the sequence that fetches.

TEST(SchedulerKvTierTest, OtherSequencesKeepDecodingWhileOneFetches) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> doc = Tokens(38, 30);  // 9 blocks in the tier
  a.Run(GreedyRequest(doc, 4));
  // x: too short to fetch anything (no full block before its last token).
  const std::vector<int32_t> x_prompt = Tokens(3, 31);
  auto x = b.Submit(GreedyRequest(x_prompt, 30));
  Collected xs, ys;
  b.StepUntil([&] { return Poll(*x, &xs), xs.token_ids.size() >= 2; });
  tier.Hold();  // the tier answers nothing until Release
  auto y = b.Submit(GreedyRequest(doc, 6));
  b.scheduler->Step();  // y admitted; its fetch starts
  tier.WaitForHeld(1);
  EXPECT_EQ(b.scheduler->GetStats().num_fetching, 1);
  Poll(*x, &xs);
  for (int i = 0; i < 10; ++i) {
    const size_t before = xs.token_ids.size();
    EXPECT_EQ(b.scheduler->Step(), 1);  // x's decode, and nothing of y
    Poll(*x, &xs);
    Poll(*y, &ys);
    EXPECT_EQ(xs.token_ids.size(), before + 1) << i;
    EXPECT_TRUE(ys.token_ids.empty());
    EXPECT_EQ(b.scheduler->GetStats().num_fetching, 1);
  }
  tier.Release();
  Poll(*x, &xs);
  const int64_t x_had = static_cast<int64_t>(xs.token_ids.size());
  const int64_t computed_before = b.runner.num_computed_tokens();
  b.StepUntil([&] { return !b.scheduler->HasWork(); });
  Poll(*x, &xs);
  Poll(*y, &ys);
  EXPECT_THAT(xs.token_ids, ElementsAreArray(Reference(x_prompt, 30)));
  EXPECT_THAT(ys.token_ids, ElementsAreArray(Reference(doc, 6)));
  EXPECT_EQ(ys.usage.cached_prompt_tokens, 9 * kBs);
  // y prefilled only its last 2 prompt tokens and decoded 5 more; x one per token it had left.
  EXPECT_EQ(b.runner.num_computed_tokens() - computed_before, 2 + 5 + (30 - x_had));
  EXPECT_EQ(b.Metric("moe_prefix_cache_hits_total", {{"tier", "l2"}}), 9);
}

TEST(SchedulerKvTierTest, ACancelledFetchNeverWritesIntoPagesThatWereFreed) {
  FakeKvTier tier(kBs * 8);
  FakeModelRunnerOptions small{.num_kv_blocks = 12, .kv_block_size = kBs};
  Router a(tier, {}, small), b(tier, {}, small);
  const std::vector<int32_t> doc = Tokens(41, 32);  // 10 blocks in the tier, 11 pages in L1
  a.Run(GreedyRequest(doc, 3));
  tier.Hold(/*after_blocks=*/2);  // two blocks arrive, then the tier stalls
  auto y = b.Submit(GreedyRequest(doc, 6));
  b.scheduler->Step();
  tier.WaitForHeld(1);
  b.scheduler->Cancel(b.ids[0]);
  b.scheduler->Step();  // y ends; its 11 pages go back to the pool
  Collected ys;
  EXPECT_TRUE(Poll(*y, &ys));
  EXPECT_EQ(ys.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(ys.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(b.scheduler->GetStats().kv.usage_ratio, 0);
  // z takes those pages (10 of the 12) and fetches nothing (the tier has none of its blocks).
  const std::vector<int32_t> z_prompt = Tokens(38, 33);
  auto z = b.Submit(GreedyRequest(z_prompt, 6));
  Collected zs;
  b.StepUntil([&] { return Poll(*z, &zs), zs.token_ids.size() >= 1; });
  // Now y's fetch goes on: had it not been cancelled, it would write 8 blocks into z's pages.
  tier.Release();
  tier.WaitForNoFetch();
  b.StepUntil([&] { return !b.scheduler->HasWork(); });
  Poll(*z, &zs);
  EXPECT_THAT(zs.token_ids, ElementsAreArray(Reference(z_prompt, 6)));
}

TEST(SchedulerKvTierTest, ARequestDeadlineEndsAFetchingSequence) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> doc = Tokens(30, 34);
  a.Run(GreedyRequest(doc, 3));
  tier.Hold();
  GenerateRequest r = GreedyRequest(doc, 6);
  r.deadline = b.clock.Now() + absl::Seconds(1);
  auto y = b.Submit(std::move(r));
  b.scheduler->Step();
  tier.WaitForHeld(1);
  b.clock.Advance(absl::Seconds(2));
  b.scheduler->Step();
  Collected ys;
  EXPECT_TRUE(Poll(*y, &ys));
  EXPECT_EQ(ys.finish_reason, FinishReason::kAbort);
  EXPECT_EQ(ys.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(b.scheduler->GetStats().kv.usage_ratio, 0);
  EXPECT_FALSE(b.scheduler->HasWork());
  tier.Release();
}

TEST(SchedulerKvTierTest, ATierThatDiesMidFetchLeavesWhatArrivedAndThePrefillOfTheRest) {
  FakeKvTier tier(kBs * 8);
  Router a(tier), b(tier);
  const std::vector<int32_t> doc = Tokens(41, 35);
  a.Run(GreedyRequest(doc, 6));
  tier.Hold(/*after_blocks=*/3);
  auto y = b.Submit(GreedyRequest(doc, 6));
  b.scheduler->Step();
  tier.WaitForHeld(1);
  tier.set_available(false);  // dies with 3 of its 10 blocks delivered
  tier.Release();
  b.StepUntil([&] { return !b.scheduler->HasWork(); });
  Collected ys;
  EXPECT_TRUE(Poll(*y, &ys));
  EXPECT_EQ(ys.finish_reason, FinishReason::kLength);
  EXPECT_THAT(ys.token_ids, ElementsAreArray(Reference(doc, 6)));
  EXPECT_EQ(ys.usage.cached_prompt_tokens, 3 * kBs);
}

TEST(SchedulerKvTierTest, AFetchPastItsDeadlineIsGivenUpAndThePromptPrefilled) {
  FakeKvTier tier(kBs * 8);
  tier.set_fetch_timeout(absl::Seconds(1));
  Router a(tier), b(tier);
  const std::vector<int32_t> doc = Tokens(41, 36);
  a.Run(GreedyRequest(doc, 6));
  tier.Hold();  // never answers in time
  auto y = b.Submit(GreedyRequest(doc, 6));
  b.scheduler->Step();
  EXPECT_EQ(b.scheduler->GetStats().num_fetching, 1);
  b.clock.Advance(absl::Seconds(5));  // past its deadline and the grace
  EXPECT_GT(b.scheduler->Step(), 0);  // given up: the whole prompt prefills
  EXPECT_EQ(b.scheduler->GetStats().num_fetching, 0);
  b.StepUntil([&] { return !b.scheduler->HasWork(); });
  tier.Release();
  Collected ys;
  EXPECT_TRUE(Poll(*y, &ys));
  EXPECT_THAT(ys.token_ids, ElementsAreArray(Reference(doc, 6)));
  EXPECT_EQ(ys.usage.cached_prompt_tokens, 0);
}

TEST(SchedulerKvTierTest, FetchesInFlightAreBoundedTheRestPrefill) {
  FakeKvTier tier(kBs * 8);
  SchedulerOptions o;
  o.kv_fetch_max_fetches = 1;
  Router a(tier), b(tier, o);
  const std::vector<int32_t> d1 = Tokens(30, 37), d2 = Tokens(30, 38);
  std::vector<GenerateRequest> both;
  both.push_back(GreedyRequest(d1, 4));
  both.push_back(GreedyRequest(d2, 4));
  a.Run(std::move(both));
  tier.Hold();
  auto y1 = b.Submit(GreedyRequest(d1, 4));
  auto y2 = b.Submit(GreedyRequest(d2, 4));
  EXPECT_EQ(b.scheduler->Step(), 30);  // y1 fetches; y2 found no slot and prefills
  EXPECT_EQ(b.scheduler->GetStats().num_fetching, 1);
  tier.Release();
  b.StepUntil([&] { return !b.scheduler->HasWork(); });
  Collected c1, c2;
  Poll(*y1, &c1);
  Poll(*y2, &c2);
  EXPECT_THAT(c1.token_ids, ElementsAreArray(Reference(d1, 4)));
  EXPECT_THAT(c2.token_ids, ElementsAreArray(Reference(d2, 4)));
  EXPECT_EQ(c1.usage.cached_prompt_tokens, 7 * kBs);
  EXPECT_EQ(c2.usage.cached_prompt_tokens, 0);
}

TEST(SchedulerKvTierTest, APreemptedFetchingSequenceIsCancelledAndComesBackTheSame) {
  // 12 pages: y (33 tokens, 9 pages) fetches while x decodes; x's 4th page preempts y.
  FakeKvTier tier(kBs * 8);
  FakeModelRunnerOptions small{.num_kv_blocks = 12, .kv_block_size = kBs};
  Router a(tier, {}, small), b(tier, {}, small);
  const std::vector<int32_t> doc = Tokens(33, 39);
  a.Run(GreedyRequest(doc, 3));
  const std::vector<int32_t> x_prompt = Tokens(3, 40);
  auto x = b.Submit(GreedyRequest(x_prompt, 12));  // arrives first: y is the victim
  Collected xs, ys;
  b.StepUntil([&] { return Poll(*x, &xs), xs.token_ids.size() >= 1; });
  tier.Hold(/*after_blocks=*/1);
  auto y = b.Submit(GreedyRequest(doc, 4));
  b.StepUntil([&] { return b.scheduler->GetStats().num_fetching == 1; });
  tier.WaitForHeld(1);
  b.StepUntil([&] { return b.scheduler->GetStats().num_preemptions > 0; });
  EXPECT_EQ(b.scheduler->GetStats().num_fetching, 0);  // cancelled with its pages
  tier.Release();
  tier.WaitForNoFetch();
  b.StepUntil([&] { return !b.scheduler->HasWork(); });
  Poll(*x, &xs);
  Poll(*y, &ys);
  EXPECT_THAT(xs.token_ids, ElementsAreArray(Reference(x_prompt, 12)));
  EXPECT_THAT(ys.token_ids, ElementsAreArray(Reference(doc, 4)));
}

TEST(KvFetcherTest, BoundsFetchesAndBytesAndACancelledJobWritesNothing) {
  FakeKvTier tier(kBs * 8);
  FakeModelRunner runner(FakeModelRunnerOptions{.num_kv_blocks = 16, .kv_block_size = kBs});
  std::vector<kv::BlockHash> hashes;
  for (uint64_t i = 1; i <= 6; ++i) {
    hashes.push_back(kv::BlockHash{i, i * 7});
    tier.Store(hashes[0], std::span<const kv::BlockHash>(&hashes.back(), 1),
               [&](size_t, std::span<uint8_t> dst) {
                 std::fill(dst.begin(), dst.end(), static_cast<uint8_t>(i));
               });
  }
  // Room for 2 jobs and 5 blocks' bytes.
  KvFetcher fetcher({.num_threads = 2, .max_fetches = 2, .max_bytes = 5 * kBs * 8}, tier, runner,
                    nullptr);
  const absl::Time now = absl::UnixEpoch();
  tier.Hold();
  auto first = fetcher.Start(hashes[0], {hashes[0], hashes[1], hashes[2]}, {0, 1, 2},
                             absl::Seconds(60), now, now);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->num_asked(), 3);
  // Trimmed to the 2 blocks of bytes left.
  auto second = fetcher.Start(hashes[0], {hashes[0], hashes[1], hashes[2], hashes[3]}, {4, 5, 6, 7},
                              absl::Seconds(60), now, now);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->num_asked(), 2);
  EXPECT_EQ(fetcher.bytes_in_flight(), 5 * kBs * 8);
  // No job slot left.
  EXPECT_EQ(fetcher.Start(hashes[0], {hashes[0]}, {8}, absl::Seconds(60), now, now), nullptr);
  tier.WaitForHeld(2);
  second->Cancel();
  tier.Release();
  tier.WaitForNoFetch();
  for (int i = 0; i < 100000 && !(first->done() && second->done()); ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  ASSERT_TRUE(first->done() && second->done());
  EXPECT_EQ(first->num_fetched(), 3);
  EXPECT_EQ(first->num_from_l2(), 3);
  std::vector<uint8_t> page(static_cast<size_t>(kBs * 8));
  ASSERT_TRUE(runner.ReadKvBlock(2, page).ok());
  EXPECT_EQ(page[0], 3);  // the third hash's bytes, in the third page
  // The cancelled job wrote nothing into its pages (they are still zero).
  for (int32_t p : {4, 5}) {
    ASSERT_TRUE(runner.ReadKvBlock(p, page).ok());
    EXPECT_EQ(page[0], 0) << p;
  }
  EXPECT_EQ(fetcher.num_in_flight(), 0);
  EXPECT_EQ(fetcher.bytes_in_flight(), 0);
}

TEST(SchedulerKvTierTest, ATierOfAnotherBlockSizeIsRefused) {
  FakeKvTier tier(kBs * 8 + 1);
  FakeModelRunner runner(FakeModelRunnerOptions{.kv_block_size = kBs});
  common::metrics::Registry registry;
  RouterMetrics metrics(registry, "fake");
  FakeClock clock;
  auto blocks = testing::MakeBlockManager(runner, true);
  ASSERT_TRUE(blocks.ok());
  EXPECT_THAT(Scheduler::Create({}, std::move(*blocks), runner, tier, clock, metrics),
              common::testing::StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::router
