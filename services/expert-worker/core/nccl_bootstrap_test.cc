#include "services/expert-worker/core/nccl_bootstrap.h"

#include "common/nccl/testing/fake_communicator.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::expert_worker {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

TEST(NcclBootstrapTest, WithoutADeviceTheOfferFailsWithTheFactorysReason) {
  nccl::testing::FakeCommunicatorFactory f(absl::FailedPreconditionError("nccl: no CUDA device 0"));
  NcclBootstrap b(f);
  EXPECT_THAT(b.Offer().status(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA device")));
}

TEST(NcclBootstrapTest, PendingJoinsAreBoundedAndAnUnmetJoinTimesOut) {
  nccl::testing::FakeCommunicatorFactory f;
  NcclBootstrap b(f, {.max_pending_joins = 1, .join_timeout = absl::Seconds(60)});
  ASSERT_OK_AND_ASSIGN(NcclOffer first, b.Offer());
  EXPECT_THAT(b.Offer().status(), StatusIs(absl::StatusCode::kResourceExhausted));
  // The caller joins: the pending join completes and frees the bound.
  ASSERT_OK(
      f.Join(first.unique_id, first.num_ranks, first.caller_rank, absl::Seconds(60)).status());
  b.WaitIdle();
  EXPECT_EQ(b.num_joined(), 1);
  NcclBootstrap impatient(f, {.join_timeout = absl::ZeroDuration()});
  ASSERT_OK(impatient.Offer().status());
  impatient.WaitIdle();  // nobody joins: the timeout ends it
  EXPECT_EQ(impatient.num_failed(), 1);
  EXPECT_EQ(impatient.num_joined(), 0);
}

}  // namespace
}  // namespace moe::expert_worker
