// Micro-batch ping-pong (EngineOptions::micro_batches): with an expert executor that runs
// concurrently, a step is split in two and the dense part of one half runs while the experts of
// the other are away. The results must be bitwise those of the unsplit step, errors must leave
// no call behind, and an unavailable expert must fail only the items that needed it.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/engine.h"
#include "common/engine/local_expert_executor.h"
#include "common/engine/testing/random_model.h"
#include "common/engine/testing/test_seq.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

// Runs calls on a thread of its own (its own one-thread pool), like a remote worker: Submit
// returns at once. Records the order of Submit/Await and can inject failures.
// Thread-safety: the ExpertExecutor contract (the engine calls it from one thread); every method
// locks because the executor's own thread shares the queue and the results.
class ThreadedExpertExecutor final : public ExpertExecutor {
 public:
  explicit ThreadedExpertExecutor(const model::ModelWeights* weights)
      : pool_(1), local_(weights, &pool_), thread_([this] { Loop(); }) {}
  ~ThreadedExpertExecutor() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  absl::StatusOr<ExpertCallHandle> Submit(const ExpertCall& call) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++submits_;
    if (fail_submit_at_ == submits_) return absl::InternalError("injected submit failure");
    const ExpertCallHandle h = next_++;
    queue_.push_back({h, call});
    results_[h] = std::nullopt;
    max_outstanding_ = std::max(max_outstanding_, static_cast<int>(results_.size()));
    calls_per_layer_[call.layer_idx]++;
    cv_.notify_all();
    return h;
  }
  absl::Status Await(ExpertCallHandle h) override {
    std::vector<int32_t> unavailable;
    absl::Status s = AwaitPartial(h, &unavailable);
    if (s.ok() && !unavailable.empty()) return absl::UnavailableError("unavailable");
    return s;
  }
  absl::Status AwaitPartial(ExpertCallHandle h, std::vector<int32_t>* unavailable) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto it = results_.find(h);
    if (it == results_.end()) return absl::NotFoundError("unknown handle");
    cv_.wait(lock, [&] { return it->second.has_value(); });
    absl::Status s = *it->second;
    results_.erase(it);
    for (int32_t e : done_unavailable_[h]) unavailable->push_back(e);
    done_unavailable_.erase(h);
    return s;
  }
  bool RunsConcurrently() const override { return true; }

  // Expert `expert` of layer `layer` has no replica: its rows come back zero and it is reported.
  void MakeUnavailable(int32_t layer, int32_t expert) {
    std::lock_guard<std::mutex> lock(mu_);
    unavailable_ = {layer, expert};
  }
  void FailSubmitAt(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_submit_at_ = n;
  }
  int outstanding() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(results_.size());
  }
  int max_outstanding() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_outstanding_;
  }
  std::map<int32_t, int> TakeCallsPerLayer() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(calls_per_layer_, {});
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      auto [h, call] = queue_.front();
      queue_.pop_front();
      std::vector<int32_t> missing;
      ExpertCall run = call;
      run.batches.clear();
      for (const ExpertBatch& b : call.batches) {
        if (call.layer_idx == unavailable_.first && b.expert_id == unavailable_.second) {
          std::memset(b.output, 0, sizeof(float) * b.num_tokens * call.hidden);
          missing.push_back(b.expert_id);
        } else {
          run.batches.push_back(b);
        }
      }
      lock.unlock();
      absl::Status s;
      if (!run.batches.empty()) {
        auto lh = local_.Submit(run);
        s = lh.ok() ? local_.Await(*lh) : lh.status();
      }
      lock.lock();
      results_[h] = s;
      done_unavailable_[h] = missing;
      cv_.notify_all();
    }
  }

  kernels::ThreadPool pool_;
  LocalExpertExecutor local_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  ExpertCallHandle next_ = 1;
  int submits_ = 0;
  int fail_submit_at_ = 0;
  int max_outstanding_ = 0;
  std::pair<int32_t, int32_t> unavailable_{-1, -1};
  std::deque<std::pair<ExpertCallHandle, ExpertCall>> queue_;
  std::map<ExpertCallHandle, std::optional<absl::Status>> results_;
  std::map<ExpertCallHandle, std::vector<int32_t>> done_unavailable_;
  std::map<int32_t, int> calls_per_layer_;
  std::thread thread_;  // last: starts once the rest is built
};

using Seq = testing::TestSeq;

class MicroBatchTest : public ::testing::TestWithParam<model::Arch> {
 protected:
  void SetUp() override {
    model_ = testing::MakeTinyRandomModel(GetParam(), common::DType::kF32);
    experts_ = std::make_unique<ThreadedExpertExecutor>(&model_->weights);
    EngineOptions o;
    o.num_threads = 2;
    o.kv_num_blocks = 512;
    ASSERT_OK_AND_ASSIGN(plain_, Engine::Create(model_->config, model_->weights, o));
    o.micro_batches = 2;
    ASSERT_OK_AND_ASSIGN(split_,
                         Engine::Create(model_->config, model_->weights, o, experts_.get()));
  }

  // `n` sequences of random prompt lengths in [1, 40], private blocks.
  std::vector<Seq> MakeSeqs(std::mt19937& rng, int n) {
    std::vector<Seq> seqs(n);
    int32_t block = 0;
    for (Seq& s : seqs) {
      const int len = 1 + static_cast<int>(rng() % 40);
      for (int i = 0; i < len; ++i) {
        s.tokens.push_back(static_cast<int32_t>(rng() % model_->config.vocab_size));
      }
      for (int b = 0; b < 8; ++b) s.blocks.push_back(block++);
    }
    return seqs;
  }
  static std::vector<StepItem> Prefill(const std::vector<Seq>& seqs) {
    std::vector<StepItem> items;
    for (const Seq& s : seqs) {
      items.push_back({s.tokens, 0, s.blocks, LogitsMode::kAll});
    }
    return items;
  }
  // One decode token per sequence (appended to each).
  static std::vector<StepItem> Decode(std::vector<Seq>& seqs, std::mt19937& rng, int64_t vocab) {
    std::vector<StepItem> items;
    for (Seq& s : seqs) s.tokens.push_back(static_cast<int32_t>(rng() % vocab));
    for (const Seq& s : seqs) {
      const auto n = static_cast<int32_t>(s.tokens.size());
      items.push_back({absl::MakeConstSpan(s.tokens).subspan(n - 1), n - 1, s.blocks});
    }
    return items;
  }
  int MoeLayers() const {
    int n = 0;
    for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l)
      n += model_->config.IsMoeLayer(l);
    return n;
  }

  std::unique_ptr<testing::RandomModel> model_;
  std::unique_ptr<ThreadedExpertExecutor> experts_;
  std::unique_ptr<Engine> plain_, split_;
};

TEST_P(MicroBatchTest, PingPongIsBitwiseTheUnsplitStep) {
  std::mt19937 rng(7);
  std::vector<Seq> seqs = MakeSeqs(rng, 9);
  std::vector<Seq> copy = seqs;
  StepOutput a, b;
  for (int step = 0; step < 4; ++step) {
    std::vector<StepItem> ia, ib;
    if (step == 0) {
      ia = Prefill(seqs);
      ib = Prefill(copy);
    } else {
      std::mt19937 r1(step), r2(step);
      ia = Decode(seqs, r1, model_->config.vocab_size);
      ib = Decode(copy, r2, model_->config.vocab_size);
    }
    ASSERT_THAT(plain_->Step(ia, &a), IsOk());
    ASSERT_THAT(split_->Step(ib, &b), IsOk());
    ASSERT_EQ(a.logits.size(), b.logits.size());
    EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * sizeof(float)))
        << "step " << step;
    EXPECT_EQ(a.row_begin, b.row_begin);
    EXPECT_EQ(a.expert_tokens, b.expert_tokens);
    // Two calls (one per micro-batch) per MoE layer, and both halves were away at once.
    const std::map<int32_t, int> calls = experts_->TakeCallsPerLayer();
    EXPECT_EQ(static_cast<int>(calls.size()), MoeLayers());
    for (const auto& [layer, n] : calls) EXPECT_EQ(n, 2) << "layer " << layer;
  }
  EXPECT_EQ(experts_->max_outstanding(), 2);
  EXPECT_EQ(experts_->outstanding(), 0);
}

TEST_P(MicroBatchTest, SmallOrSingleItemStepsAreNotSplit) {
  std::mt19937 rng(3);
  std::vector<Seq> seqs = MakeSeqs(rng, 3);
  StepOutput out;
  // One item of many tokens: one call per layer.
  std::vector<StepItem> one = {{seqs[0].tokens, 0, seqs[0].blocks}};
  ASSERT_THAT(split_->Step(one, &out), IsOk());
  for (const auto& [layer, n] : experts_->TakeCallsPerLayer()) EXPECT_EQ(n, 1);
  // Three one-token items (fewer than micro_batch_min_tokens): one call per layer.
  std::vector<StepItem> three;
  for (const Seq& s : seqs)
    three.push_back({absl::MakeConstSpan(s.tokens).subspan(0, 1), 0, s.blocks});
  ASSERT_THAT(split_->Step(three, &out), IsOk());
  for (const auto& [layer, n] : experts_->TakeCallsPerLayer()) EXPECT_EQ(n, 1);
}

TEST_P(MicroBatchTest, ASubmitErrorLeavesNoCallInFlight) {
  std::mt19937 rng(5);
  std::vector<Seq> seqs = MakeSeqs(rng, 6);
  std::vector<StepItem> items = Prefill(seqs);
  StepOutput out;
  // The 2nd submit is micro-batch 1's first layer, while micro-batch 0's is in flight.
  experts_->FailSubmitAt(2);
  EXPECT_THAT(split_->Step(items, &out), StatusIs(absl::StatusCode::kInternal));
  EXPECT_EQ(experts_->outstanding(), 0);
  // The engine is usable again and exact.
  StepOutput ref;
  ASSERT_THAT(split_->Step(items, &out), IsOk());
  ASSERT_THAT(plain_->Step(items, &ref), IsOk());
  EXPECT_EQ(0, std::memcmp(out.logits.data(), ref.logits.data(), ref.logits.size() * 4));
}

TEST_P(MicroBatchTest, AnUnavailableExpertFailsOnlyTheItemsThatNeedIt) {
  std::mt19937 rng(9);
  std::vector<Seq> seqs = MakeSeqs(rng, 12);
  std::vector<StepItem> prefill = Prefill(seqs);
  StepOutput ref, out;
  ASSERT_THAT(plain_->Step(prefill, &ref), IsOk());
  ASSERT_THAT(split_->Step(prefill, &out), IsOk());
  // A decode step: one token per item, so an expert is needed by some items and not others.
  std::vector<StepItem> items = Decode(seqs, rng, model_->config.vocab_size);
  ASSERT_THAT(plain_->Step(items, &ref), IsOk());
  // Pick the last MoE layer's least-used expert that some token chose.
  const int64_t ne = model_->config.num_experts;
  int32_t layer = -1;
  for (int64_t l = 0; l < model_->config.num_hidden_layers; ++l) {
    if (model_->config.IsMoeLayer(l)) layer = static_cast<int32_t>(l);
  }
  ASSERT_GE(layer, 0);
  int32_t expert = -1;
  for (int32_t e = 0; e < ne; ++e) {
    const int64_t n = ref.expert_tokens[layer * ne + e];
    if (n > 0 && (expert < 0 || n < ref.expert_tokens[layer * ne + expert])) expert = e;
  }
  ASSERT_GE(expert, 0);
  experts_->MakeUnavailable(layer, expert);
  ASSERT_THAT(split_->Step(items, &out), IsOk());
  int failed = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!out.item_status[i].ok()) {
      ++failed;
      EXPECT_THAT(out.item_status[i], StatusIs(absl::StatusCode::kUnavailable,
                                               HasSubstr(absl::StrCat("expert ", expert))));
      continue;
    }
    const int64_t vocab = model_->config.vocab_size;
    EXPECT_EQ(0, std::memcmp(out.row(i, 0, vocab), ref.row(i, 0, vocab),
                             out.num_rows(i) * vocab * sizeof(float)))
        << "item " << i;
  }
  EXPECT_GE(failed, 1);
  EXPECT_LT(failed, static_cast<int>(items.size()));
}

INSTANTIATE_TEST_SUITE_P(Archs, MicroBatchTest,
                         ::testing::Values(model::Arch::kMixtral, model::Arch::kQwen2Moe,
                                           model::Arch::kQwen3Moe, model::Arch::kOlmoe));

}  // namespace
}  // namespace moe::engine
