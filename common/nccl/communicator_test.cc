// The NCCL bootstrap pieces that run without a GPU: unique ids (real NCCL where built), their
// wire form, the fake rendezvous the worker/router tests use, and the real factory's refusal
// without a device. A communicator across two GPUs is not tested here (one GPU cannot hold two
// ranks; no machine of this project has two).
#include "common/nccl/communicator.h"

#include <thread>

#include "common/nccl/testing/fake_communicator.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#if MOE_HAVE_NCCL
#include "common/kernels/cuda/cuda_kernels.h"
#include "common/nccl/nccl_communicator.h"
#endif

namespace moe::nccl {
namespace {

using ::moe::common::testing::IsOk;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

TEST(UniqueIdTest, WireFormIsTheRaw128BytesAndRejectsOtherSizes) {
  UniqueId id{};
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 7);
  const std::string bytes = UniqueIdToBytes(id);
  ASSERT_EQ(bytes.size(), 128u);
  ASSERT_OK_AND_ASSIGN(UniqueId back, UniqueIdFromBytes(bytes));
  EXPECT_EQ(back, id);
  EXPECT_THAT(UniqueIdFromBytes(bytes.substr(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("127 bytes")));
}

TEST(FakeCommunicatorTest, TwoRanksOfOneIdMeetAndOthersTimeOut) {
  testing::FakeCommunicatorFactory f;
  ASSERT_OK_AND_ASSIGN(UniqueId id, f.NewUniqueId());
  ASSERT_OK_AND_ASSIGN(UniqueId other, f.NewUniqueId());
  EXPECT_NE(id, other);
  absl::StatusOr<std::unique_ptr<Communicator>> worker;
  std::thread t([&] { worker = f.Join(id, 2, 1, absl::Seconds(30)); });
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> router, f.Join(id, 2, 0, absl::Seconds(30)));
  t.join();
  ASSERT_THAT(worker.status(), IsOk());
  EXPECT_EQ(router->rank(), 0);
  EXPECT_EQ((*worker)->rank(), 1);
  EXPECT_EQ(f.joined(id), 2);
  EXPECT_THAT(router->GroupedSendRecv({{.peer = 2}}, {}, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument));
  // A rank alone: the timeout, not a hang.
  EXPECT_THAT(f.Join(other, 2, 0, absl::ZeroDuration()).status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

#if MOE_HAVE_NCCL
TEST(NcclCommunicatorFactoryTest, UniqueIdsNeedNoDeviceAndDiffer) {
  NcclCommunicatorFactory f;
  ASSERT_OK_AND_ASSIGN(UniqueId a, f.NewUniqueId());
  ASSERT_OK_AND_ASSIGN(UniqueId b, f.NewUniqueId());
  EXPECT_NE(a, b);
  EXPECT_NE(NcclVersionString(), "unknown");
}

TEST(NcclCommunicatorFactoryTest, WithoutADeviceJoinSaysWhy) {
  if (kernels::cuda::DeviceCount() > 0) GTEST_SKIP() << "a device is present";
  NcclCommunicatorFactory f;
  EXPECT_THAT(f.Available(), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no CUDA")));
  ASSERT_OK_AND_ASSIGN(UniqueId id, f.NewUniqueId());
  EXPECT_THAT(f.Join(id, 2, 0, absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(f.Join(id, 2, 2, absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

// One rank on one GPU: the only communicator one device can hold (device only).
TEST(NcclCommunicatorFactoryTest, SingleRankCommunicatorJoinsOnADevice) {
  if (kernels::cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  NcclCommunicatorFactory f;
  ASSERT_OK_AND_ASSIGN(UniqueId id, f.NewUniqueId());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Communicator> c, f.Join(id, 1, 0, absl::Seconds(30)));
  EXPECT_EQ(c->num_ranks(), 1);
}
#endif

}  // namespace
}  // namespace moe::nccl
