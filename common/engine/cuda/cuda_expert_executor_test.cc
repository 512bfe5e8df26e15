// CudaExpertExecutor against the CPU LocalExpertExecutor (the oracle, NMSE bound of
// cuda_kernels.h) and bitwise batch invariance on the device; without a device, Create() says
// why (tested everywhere).
#include "common/engine/cuda/cuda_expert_executor.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "common/engine/engine.h"
#include "common/engine/local_expert_executor.h"
#include "common/engine/testing/random_model.h"
#include "common/kernels/cuda/cuda_kernels.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kHidden = 64;

std::vector<float> Inputs(int64_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(rows * kHidden);
  for (float& f : v) f = d(rng);
  return v;
}

TEST(CudaExpertExecutorNoDeviceTest, CreateSaysWhyWithoutADevice) {
  if (kernels::cuda::DeviceCount() > 0) GTEST_SKIP() << "a device is present";
  auto model = testing::MakeTinyRandomModel(model::Arch::kMixtral, common::DType::kBF16);
  EXPECT_THAT(CudaExpertExecutor::Create(model->config, model->weights).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

TEST(CudaExpertExecutorNoDeviceTest, OptionsAreValidated) {
  EXPECT_THAT(CudaExpertExecutorOptions{.initial_call_rows = 0}.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("initial_call_rows")));
}

class CudaExpertExecutorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (kernels::cuda::DeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    model_ = testing::MakeTinyRandomModel(model::Arch::kMixtral, common::DType::kBF16);
    auto exec = CudaExpertExecutor::Create(model_->config, model_->weights);
    ASSERT_THAT(exec.status(), IsOk());
    exec_ = std::move(*exec);
  }
  absl::Status Run(ExpertExecutor& e, const ExpertCall& call) {
    absl::StatusOr<ExpertCallHandle> h = e.Submit(call);
    if (!h.ok()) return h.status();
    return e.Await(*h);
  }
  std::unique_ptr<testing::RandomModel> model_;
  std::unique_ptr<CudaExpertExecutor> exec_;
};

TEST_F(CudaExpertExecutorTest, MatchesTheCpuExecutorWithinNmse) {
  kernels::ThreadPool pool(1);
  LocalExpertExecutor cpu(&model_->weights, &pool);
  const std::vector<float> in = Inputs(21, 1);
  std::vector<float> got(in.size()), want(in.size());
  for (std::vector<float>* out : {&got, &want}) {
    ExpertCall call{.layer_idx = 1, .hidden = kHidden};
    call.batches = {{6, 2, in.data(), out->data()},
                    {1, 17, in.data() + 2 * kHidden, out->data() + 2 * kHidden},
                    {3, 2, in.data() + 19 * kHidden, out->data() + 19 * kHidden}};
    ASSERT_THAT(Run(out == &got ? static_cast<ExpertExecutor&>(*exec_) : cpu, call), IsOk());
  }
  double err = 0, ref = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    ref += double(want[i]) * want[i];
  }
  EXPECT_LE(err / ref, 1e-4);
}

TEST_F(CudaExpertExecutorTest, RowIsBitwiseTheSameAloneOrInAnyCall) {
  const std::vector<float> row = Inputs(1, 2);
  std::vector<float> alone(kHidden);
  ExpertCall single{.layer_idx = 0, .hidden = kHidden};
  single.batches = {{4, 1, row.data(), alone.data()}};
  ASSERT_THAT(Run(*exec_, single), IsOk());
  for (int pos : {0, 9, 30}) {
    std::vector<float> in = Inputs(40, 3 + pos), out(in.size());
    std::memcpy(in.data() + (5 + pos) * kHidden, row.data(), kHidden * sizeof(float));
    ExpertCall call{.layer_idx = 0, .hidden = kHidden};
    call.batches = {{0, 5, in.data(), out.data()},
                    {4, 31, in.data() + 5 * kHidden, out.data() + 5 * kHidden},
                    {7, 4, in.data() + 36 * kHidden, out.data() + 36 * kHidden}};
    ASSERT_THAT(Run(*exec_, call), IsOk());
    EXPECT_EQ(std::memcmp(out.data() + (5 + pos) * kHidden, alone.data(), kHidden * 4), 0)
        << "position " << pos;
  }
}

TEST_F(CudaExpertExecutorTest, RejectsUnknownLayerExpertOrHidden) {
  std::vector<float> buf(kHidden);
  ExpertCall call{.layer_idx = 5, .hidden = kHidden};
  call.batches = {{0, 1, buf.data(), buf.data()}};
  EXPECT_THAT(Run(*exec_, call), StatusIs(absl::StatusCode::kInvalidArgument));
  call.layer_idx = 0;
  call.batches[0].expert_id = 8;
  EXPECT_THAT(Run(*exec_, call),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not loaded")));
  call.batches[0].expert_id = 0;
  call.hidden = 32;
  EXPECT_THAT(Run(*exec_, call), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hidden")));
}

// The engine with its experts on the device: a prompt's logits close to the CPU engine's in the
// bf16-activation mode (the same bound as engine_bf16_test: within 3% of the largest |logit|),
// and bitwise the same whether the prompt runs alone or batched with another sequence.
TEST_F(CudaExpertExecutorTest, EngineWithDeviceExpertsStaysCloseToTheCpuAndBatchInvariant) {
  const EngineOptions eo{.kv_num_blocks = 16, .activations = kernels::Activations::kBf16};
  ASSERT_OK_AND_ASSIGN(auto cpu, Engine::Create(model_->config, model_->weights, eo));
  ASSERT_OK_AND_ASSIGN(auto gpu, Engine::Create(model_->config, model_->weights, eo, exec_.get()));
  std::vector<int32_t> prompt, other;
  for (int i = 0; i < 20; ++i) prompt.push_back((i * 37 + 5) % 512);
  for (int i = 0; i < 9; ++i) other.push_back((i * 11 + 3) % 512);
  const std::vector<int32_t> blocks_a = {0, 1}, blocks_b = {2, 3};
  const int64_t vocab = model_->config.vocab_size;
  StepOutput out;
  std::vector<float> cpu_logits, gpu_alone;
  for (Engine* e : {cpu.get(), gpu.get()}) {
    const StepItem item{.token_ids = prompt, .block_table = blocks_a};
    ASSERT_THAT(e->Step({item}, &out), IsOk());
    std::vector<float>& dst = e == cpu.get() ? cpu_logits : gpu_alone;
    dst.assign(out.row(0, 0, vocab), out.row(0, 0, vocab) + vocab);
  }
  float max_abs = 0, max_diff = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    max_abs = std::max(max_abs, std::fabs(cpu_logits[v]));
    max_diff = std::max(max_diff, std::fabs(cpu_logits[v] - gpu_alone[v]));
  }
  EXPECT_LE(max_diff, 0.03f * max_abs);
  const StepItem first{.token_ids = other, .block_table = blocks_b};
  const StepItem again{.token_ids = prompt, .block_table = blocks_a};
  ASSERT_THAT(gpu->Step({first, again}, &out), IsOk());
  EXPECT_EQ(std::memcmp(out.row(1, 0, vocab), gpu_alone.data(), vocab * sizeof(float)), 0);
}

}  // namespace
}  // namespace moe::engine
