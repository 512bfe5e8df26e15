#include "common/grpc/signals.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace moe::common::rpc {
namespace {

// Each case runs in a fresh child process ("threadsafe" death-test style re-executes the
// binary), where no thread of another test exists that could take the signal.
class SignalsDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(SignalsDeathTest, WaitReturnsTheSignalInsteadOfDying) {
  EXPECT_EXIT(
      {
        BlockTerminationSignals();
        ::kill(::getpid(), SIGTERM);
        std::_Exit(WaitForTerminationSignal() == SIGTERM ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(SignalsDeathTest, WatcherRunsTheCallbackOnItsThread) {
  EXPECT_EXIT(
      {
        BlockTerminationSignals();
        absl::Notification got;
        int seen = 0;
        TerminationWatcher watcher([&](int signo) {
          seen = signo;
          got.Notify();
        });
        ::kill(::getpid(), SIGINT);
        got.WaitForNotification();
        std::_Exit(seen == SIGINT ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(SignalsDeathTest, WatcherStopsWithoutASignal) {
  EXPECT_EXIT(
      {
        BlockTerminationSignals();
        bool called = false;
        {
          TerminationWatcher watcher([&](int) { called = true; });
        }
        std::_Exit(called ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace moe::common::rpc
