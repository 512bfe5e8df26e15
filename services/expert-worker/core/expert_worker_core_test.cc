#include "services/expert-worker/core/expert_worker_core.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/engine/local_expert_executor.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::expert_worker {
namespace {

using common::testing::IsOk;
using common::testing::StatusIs;

class ExpertWorkerCoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("expert_worker_core_test"));
    model::MakeModelOptions make;
    make.preset = model::Preset::kTiny;
    ASSERT_OK(model::MakeModel(make, *dir_));
  }
  static void TearDownTestSuite() { delete dir_; }

  std::unique_ptr<ExpertWorkerCore> MakeCore(std::vector<std::string> experts,
                                             int max_inline_calls = 1) {
    ExpertWorkerCoreOptions o;
    o.model_dir = *dir_;
    o.experts = std::move(experts);
    o.max_concurrent_calls = 2;
    o.max_inline_calls = max_inline_calls;
    auto core = ExpertWorkerCore::Create(o, registry_, common::SystemClock::Get());
    EXPECT_OK(core.status());
    return core.ok() ? std::move(*core) : nullptr;
  }

  // Inputs for `num_tokens` rows of width `hidden`, distinct per row.
  static std::vector<float> Inputs(int64_t num_tokens, int64_t hidden, float seed) {
    std::vector<float> x(static_cast<size_t>(num_tokens * hidden));
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(seed + 0.37f * static_cast<float>(i));
    return x;
  }

  static std::string* dir_;
  common::metrics::Registry registry_;
};
std::string* ExpertWorkerCoreTest::dir_ = nullptr;

TEST_F(ExpertWorkerCoreTest, ParsesSpecsIntoSortedDistinctKeys) {
  auto ckpt = model::Checkpoint::Open(*dir_, model::LoadOptions::OnlyExperts({}));
  ASSERT_OK(ckpt.status());
  auto keys = ParseExpertSpecs({"1:3", "*:0-1", "0:1"}, (*ckpt)->config());
  ASSERT_OK(keys.status());
  EXPECT_EQ(*keys, (std::vector<ExpertKey>{{0, 0}, {0, 1}, {1, 0}, {1, 1}, {1, 3}}));
  EXPECT_THAT(ParseExpertSpecs({"0:9"}, (*ckpt)->config()),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseExpertSpecs({"x"}, (*ckpt)->config()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ExpertWorkerCoreTest, MapsOnlyConfiguredExperts) {
  auto core = MakeCore({"0:2", "1:5"});
  ASSERT_NE(core, nullptr);
  EXPECT_EQ(core->resident().experts, (std::vector<ExpertKey>{{0, 2}, {1, 5}}));
  const int64_t c = core->config().hidden_size * core->config().moe_intermediate_size * 4;
  EXPECT_EQ(core->resident().bytes, 2 * 3 * c);
}

TEST_F(ExpertWorkerCoreTest, UnavailableUntilWarmedUp) {
  auto core = MakeCore({"0:0"});
  ASSERT_NE(core, nullptr);
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(2, hidden, 1.0f), out(in.size());
  engine::ExpertCall call{0, hidden, {{0, 2, in.data(), out.data()}}};
  EXPECT_THAT(core->Run(call), StatusIs(absl::StatusCode::kUnavailable));
  ASSERT_OK(core->WarmUp());
  EXPECT_TRUE(core->ready());
  EXPECT_OK(core->Run(call));
}

TEST_F(ExpertWorkerCoreTest, OutputsAreBitwiseTheInProcessExecutors) {
  auto core = MakeCore({"*:1-3"});
  ASSERT_NE(core, nullptr);
  ASSERT_OK(core->WarmUp());
  auto full = model::Checkpoint::Open(*dir_);
  ASSERT_OK(full.status());
  kernels::ThreadPool pool(1);
  engine::LocalExpertExecutor local(&(*full)->weights(), &pool);

  const int64_t hidden = core->config().hidden_size;
  for (int32_t layer = 0; layer < 2; ++layer) {
    std::vector<float> a = Inputs(5, hidden, 0.5f), b = Inputs(1, hidden, 2.0f);
    std::vector<float> oa(a.size()), ob(b.size()), ra(a.size()), rb(b.size());
    engine::ExpertCall call{
        layer, hidden, {{3, 5, a.data(), oa.data()}, {1, 1, b.data(), ob.data()}}};
    ASSERT_OK(core->Run(call));
    engine::ExpertCall ref{
        layer, hidden, {{3, 5, a.data(), ra.data()}, {1, 1, b.data(), rb.data()}}};
    auto h = local.Submit(ref);
    ASSERT_OK(h.status());
    ASSERT_OK(local.Await(*h));
    EXPECT_EQ(std::memcmp(oa.data(), ra.data(), oa.size() * 4), 0) << "layer " << layer;
    EXPECT_EQ(std::memcmp(ob.data(), rb.data(), ob.size() * 4), 0) << "layer " << layer;
  }
  EXPECT_EQ(registry_.Value("moe_expert_worker_tokens_total").value(), 12);
  EXPECT_EQ(registry_.Value("moe_expert_worker_calls_total").value(), 2);
}

// activations: bf16 (a bf16 checkpoint) computes as the in-process executor in that mode, which
// differs from f32 (the option reaches the kernels).
TEST_F(ExpertWorkerCoreTest, Bf16ActivationsAreTheInProcessExecutorsInThatMode) {
  const std::string dir = common::testing::MakeTempDir("expert_worker_core_bf16");
  model::MakeModelOptions make;
  make.preset = model::Preset::kTiny;
  make.dtype = common::DType::kBF16;
  ASSERT_OK(model::MakeModel(make, dir));
  ExpertWorkerCoreOptions o;
  o.model_dir = dir;
  o.experts = {"*:0-1"};
  o.activations = kernels::Activations::kBf16;
  auto core = ExpertWorkerCore::Create(o, registry_, common::SystemClock::Get());
  ASSERT_OK(core.status());
  ASSERT_OK((*core)->WarmUp());
  auto full = model::Checkpoint::Open(dir);
  ASSERT_OK(full.status());
  kernels::ThreadPool pool(1);
  engine::LocalExpertExecutor bf16(&(*full)->weights(), &pool, kernels::Activations::kBf16);
  engine::LocalExpertExecutor f32(&(*full)->weights(), &pool, kernels::Activations::kF32);
  const int64_t hidden = (*core)->config().hidden_size;
  std::vector<float> in = Inputs(4, hidden, 0.5f), out(in.size()), want(in.size()),
                     other(in.size());
  ASSERT_OK((*core)->Run({0, hidden, {{1, 4, in.data(), out.data()}}}));
  for (auto [exec, dst] : {std::pair{&bf16, &want}, std::pair{&f32, &other}}) {
    auto h = exec->Submit({0, hidden, {{1, 4, in.data(), dst->data()}}});
    ASSERT_OK(h.status());
    ASSERT_OK(exec->Await(*h));
  }
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * 4), 0);
  EXPECT_NE(std::memcmp(out.data(), other.data(), out.size() * 4), 0);
  core->reset();
  std::filesystem::remove_all(dir);
}

// weights: q8_0 quantizes the resident experts on load and computes as the in-process executor
// over a checkpoint loaded the same way (bitwise), which differs from the stored weights' bits;
// a caller in the other weights mode is refused naming core.weights.
TEST_F(ExpertWorkerCoreTest, Q8WeightsAreTheInProcessExecutorsOverQ8Weights) {
  const std::string dir = common::testing::MakeTempDir("expert_worker_core_q8");
  model::MakeModelOptions make;
  make.preset = model::Preset::kTiny;
  make.dtype = common::DType::kBF16;
  ASSERT_OK(model::MakeModel(make, dir));
  ExpertWorkerCoreOptions o;
  o.model_dir = dir;
  o.experts = {"*:0-1"};
  o.weights = model::WeightsMode::kQ8_0;
  auto core = ExpertWorkerCore::Create(o, registry_, common::SystemClock::Get());
  ASSERT_OK(core.status());
  ASSERT_OK((*core)->WarmUp());
  EXPECT_OK((*core)->CheckWeights(model::WeightsMode::kQ8_0));
  EXPECT_THAT((*core)->CheckWeights(model::WeightsMode::kCheckpoint),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("core.weights")));
  model::LoadOptions q8_load;
  q8_load.weights = model::WeightsMode::kQ8_0;
  auto q8 = model::Checkpoint::Open(dir, q8_load);
  ASSERT_OK(q8.status());
  auto stored = model::Checkpoint::Open(dir);
  ASSERT_OK(stored.status());
  ASSERT_EQ((*q8)->weights().layers[0].experts[1].gate.dtype, common::DType::kQ8_0);
  kernels::ThreadPool pool(1);
  engine::LocalExpertExecutor want_exec(&(*q8)->weights(), &pool);
  engine::LocalExpertExecutor stored_exec(&(*stored)->weights(), &pool);
  const int64_t hidden = (*core)->config().hidden_size;
  std::vector<float> in = Inputs(4, hidden, 0.5f), out(in.size()), want(in.size()),
                     other(in.size());
  ASSERT_OK((*core)->Run({0, hidden, {{1, 4, in.data(), out.data()}}}));
  for (auto [exec, dst] : {std::pair{&want_exec, &want}, std::pair{&stored_exec, &other}}) {
    auto h = exec->Submit({0, hidden, {{1, 4, in.data(), dst->data()}}});
    ASSERT_OK(h.status());
    ASSERT_OK(exec->Await(*h));
  }
  EXPECT_EQ(std::memcmp(out.data(), want.data(), out.size() * 4), 0);
  EXPECT_NE(std::memcmp(out.data(), other.data(), out.size() * 4), 0);
  core->reset();
  std::filesystem::remove_all(dir);
}

TEST_F(ExpertWorkerCoreTest, ComputeCudaNeedsBf16ActivationsAndOneSlot) {
  ExpertWorkerCoreOptions o{.model_dir = *dir_, .compute = Compute::kCuda};
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     ::testing::HasSubstr("activations: bf16")));
  o.activations = kernels::Activations::kBf16;
  o.max_concurrent_calls = 2;
  EXPECT_THAT(o.Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                     ::testing::HasSubstr("max_concurrent_calls: 1")));
  o.max_concurrent_calls = 1;
  EXPECT_OK(o.Validate());
  o.weights = model::WeightsMode::kQ8_0;
  EXPECT_THAT(o.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::HasSubstr("CPU-only")));
}

// Without a GPU (or without nvcc at build time) a cuda worker refuses to start, saying why; the
// device run (tests/gpu/device_check.sh) covers the other case through CudaExpertExecutor.
TEST_F(ExpertWorkerCoreTest, ComputeCudaWithoutADeviceFailsToStartWithTheReason) {
  const ExpertWorkerCoreOptions o{.model_dir = *dir_,
                                  .experts = {"*:0"},
                                  .activations = kernels::Activations::kBf16,
                                  .compute = Compute::kCuda};
  auto core = ExpertWorkerCore::Create(o, registry_, common::SystemClock::Get());
  if (core.ok()) GTEST_SKIP() << "a CUDA device is present";
  EXPECT_THAT(core.status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::HasSubstr("CUDA")));
}

TEST_F(ExpertWorkerCoreTest, RejectsBadCalls) {
  auto core = MakeCore({"0:0-1"});
  ASSERT_NE(core, nullptr);
  ASSERT_OK(core->WarmUp());
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(1, hidden, 1.0f), out(in.size()), out2(in.size());
  EXPECT_THAT(core->Run({0, hidden, {{4, 1, in.data(), out.data()}}}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(
      core->Run({0, hidden, {{0, 1, in.data(), out.data()}, {0, 1, in.data(), out2.data()}}}),
      StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(core->Run({0, hidden + 1, {{0, 1, in.data(), out.data()}}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(core->Run({7, hidden, {{0, 1, in.data(), out.data()}}}),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(core->Run({0, hidden, {}}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ExpertWorkerCoreTest, LoadAndUnloadChangeWhatRuns) {
  auto core = MakeCore({"0:0"});
  ASSERT_NE(core, nullptr);
  ASSERT_OK(core->WarmUp());
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(3, hidden, 1.0f), out(in.size());
  engine::ExpertCall call{1, hidden, {{6, 3, in.data(), out.data()}}};
  EXPECT_THAT(core->Run(call), StatusIs(absl::StatusCode::kFailedPrecondition));
  auto loaded = core->Load({{1, 6}, {0, 0}});
  ASSERT_OK(loaded.status());
  EXPECT_EQ(loaded->experts, (std::vector<ExpertKey>{{0, 0}, {1, 6}}));
  EXPECT_OK(core->Run(call));
  EXPECT_EQ(core->Unload({{0, 0}, {1, 7}}).experts, (std::vector<ExpertKey>{{1, 6}}));
  EXPECT_THAT(core->Run({0, hidden, {{0, 3, in.data(), out.data()}}}),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(core->Load({{0, 8}}), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(registry_.Value("moe_expert_worker_resident_experts").value(), 1);
}

// What one RunAsync reported, and on which thread.
struct AsyncResult {
  absl::Notification done;
  absl::Status status;
  std::thread::id thread;
};

ExpertWorkerCore::RunDone Record(AsyncResult* r) {
  return [r](absl::Status s, absl::Duration) {
    r->status = std::move(s);
    r->thread = std::this_thread::get_id();
    r->done.Notify();
  };
}

TEST_F(ExpertWorkerCoreTest, RunAsyncComputesInlineOnTheCallingThreadBitwiseAsRun) {
  auto core = MakeCore({"0:0-1"});
  ASSERT_NE(core, nullptr);
  ASSERT_OK(core->WarmUp());
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(3, hidden, 0.7f), out(in.size()), ref(in.size());
  ASSERT_OK(core->Run({0, hidden, {{1, 3, in.data(), ref.data()}}}));
  AsyncResult r;
  core->RunAsync({0, hidden, {{1, 3, in.data(), out.data()}}}, Record(&r));
  ASSERT_TRUE(r.done.HasBeenNotified());  // inline: done before RunAsync returned
  EXPECT_OK(r.status);
  EXPECT_EQ(r.thread, std::this_thread::get_id());
  EXPECT_EQ(std::memcmp(out.data(), ref.data(), out.size() * 4), 0);
}

TEST_F(ExpertWorkerCoreTest, RunAsyncHandsOffToSlotThreadsWhenInlineIsOff) {
  auto core = MakeCore({"0:0-1"}, /*max_inline_calls=*/0);
  ASSERT_NE(core, nullptr);
  ASSERT_OK(core->WarmUp());
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(2, hidden, 0.3f), ref(in.size());
  ASSERT_OK(core->Run({0, hidden, {{0, 2, in.data(), ref.data()}}}));
  std::vector<std::vector<float>> outs(4, std::vector<float>(in.size()));
  std::vector<AsyncResult> results(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    core->RunAsync({0, hidden, {{0, 2, in.data(), outs[i].data()}}}, Record(&results[i]));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    results[i].done.WaitForNotification();
    EXPECT_OK(results[i].status);
    EXPECT_NE(results[i].thread, std::this_thread::get_id());
    EXPECT_EQ(std::memcmp(outs[i].data(), ref.data(), ref.size() * 4), 0) << i;
  }
  EXPECT_EQ(registry_.Value("moe_expert_worker_calls_total").value(), 5);
}

TEST_F(ExpertWorkerCoreTest, RunAsyncReportsBadCallsOnTheCallingThread) {
  auto core = MakeCore({"0:0-1"});
  ASSERT_NE(core, nullptr);
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(1, hidden, 1.0f), out(in.size());
  AsyncResult bad, cold;
  core->RunAsync({0, hidden + 1, {{0, 1, in.data(), out.data()}}}, Record(&bad));
  ASSERT_TRUE(bad.done.HasBeenNotified());
  EXPECT_THAT(bad.status, StatusIs(absl::StatusCode::kInvalidArgument));
  core->RunAsync({0, hidden, {{0, 1, in.data(), out.data()}}}, Record(&cold));
  cold.done.WaitForNotification();
  EXPECT_THAT(cold.status, StatusIs(absl::StatusCode::kUnavailable));  // not warmed up
}

TEST_F(ExpertWorkerCoreTest, DestructionFinishesQueuedCalls) {
  auto core = MakeCore({"0:0"}, /*max_inline_calls=*/0);
  ASSERT_NE(core, nullptr);
  ASSERT_OK(core->WarmUp());
  const int64_t hidden = core->config().hidden_size;
  std::vector<float> in = Inputs(4, hidden, 0.1f);
  std::vector<std::vector<float>> outs(8, std::vector<float>(in.size()));
  std::vector<AsyncResult> results(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    core->RunAsync({0, hidden, {{0, 4, in.data(), outs[i].data()}}}, Record(&results[i]));
  }
  core.reset();
  for (const AsyncResult& r : results) {
    EXPECT_TRUE(r.done.HasBeenNotified());
    EXPECT_OK(r.status);
  }
}

}  // namespace
}  // namespace moe::expert_worker
