#include "common/grpc/callback_queue_keeper.h"

#include <thread>

#include "gtest/gtest.h"

namespace moe::common::rpc {
namespace {

// Its calls complete (their callbacks ran on the callback queue), again and again; starting it
// twice starts one keeper. Its effect on latency is measured by `moe bench rpc`
// (rpc_after_idle_round_trip_us_max_{no_keeper,keeper}), not timed here.
TEST(CallbackQueueKeeperTest, CompletesACallEveryInterval) {
  EXPECT_EQ(CallbackQueueKeeperTicks(), 0);
  KeepCallbackQueueAwake();
  KeepCallbackQueueAwake();
  for (int i = 0; i < 400 && CallbackQueueKeeperTicks() < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_GE(CallbackQueueKeeperTicks(), 3);
}

}  // namespace
}  // namespace moe::common::rpc
