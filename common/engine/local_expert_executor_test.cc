#include "common/engine/local_expert_executor.h"

#include <cmath>
#include <vector>

#include "common/engine/testing/random_model.h"
#include "common/kernels/reference/reference.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::engine {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

class LocalExpertExecutorTest : public ::testing::Test {
 protected:
  LocalExpertExecutorTest()
      : model_(testing::MakeTinyRandomModel(model::Arch::kMixtral, common::DType::kBF16)),
        pool_(2),
        exec_(&model_->weights, &pool_) {}
  std::unique_ptr<testing::RandomModel> model_;
  kernels::ThreadPool pool_;
  LocalExpertExecutor exec_;
};

TEST_F(LocalExpertExecutorTest, RunsEachExpertsRowsAsTheSwiGluFfn) {
  const int64_t h = 64;
  std::vector<float> in(5 * h), out(5 * h, -1.0f);
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::sin(0.37f * static_cast<float>(i));
  ExpertCall call;
  call.layer_idx = 1;
  call.hidden = h;
  call.batches = {{6, 2, in.data(), out.data()}, {1, 3, in.data() + 2 * h, out.data() + 2 * h}};
  ASSERT_OK_AND_ASSIGN(ExpertCallHandle handle, exec_.Submit(call));
  ASSERT_THAT(exec_.Await(handle), IsOk());
  // Against the slow reference kernels, row by row.
  for (int64_t row = 0; row < 5; ++row) {
    const auto& w = model_->weights.layers[1].experts[row < 2 ? 6 : 1];
    std::vector<float> g(128), u(128), y(h);
    kernels::reference::MatMul(in.data() + row * h, 1, w.gate, g.data());
    kernels::reference::MatMul(in.data() + row * h, 1, w.up, u.data());
    kernels::reference::SiluMul(g.data(), u.data(), 128);
    kernels::reference::MatMul(g.data(), 1, w.down, y.data());
    for (int64_t d = 0; d < h; ++d) EXPECT_NEAR(out[row * h + d], y[d], 1e-4) << row << "," << d;
  }
  EXPECT_THAT(exec_.Await(handle), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(LocalExpertExecutorTest, RejectsUnknownLayerOrExpert) {
  std::vector<float> buf(64);
  ExpertCall call;
  call.layer_idx = 1;
  call.hidden = 64;
  call.batches = {{8, 1, buf.data(), buf.data()}};
  ASSERT_OK_AND_ASSIGN(ExpertCallHandle handle, exec_.Submit(call));
  EXPECT_THAT(exec_.Await(handle),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("expert 8 of layer 1")));
  call.layer_idx = 2;
  call.batches[0].expert_id = 0;
  ASSERT_OK_AND_ASSIGN(handle, exec_.Submit(call));
  EXPECT_THAT(exec_.Await(handle), StatusIs(absl::StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace moe::engine
