#include "common/process/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "common/process/process_test_util.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::process {
namespace {

using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

using testing::kLong;
using testing::Shell;

class ChildProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("child_process_test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

TEST_F(ChildProcessTest, ReadsStdoutLineByLineThenEndOfOutput) {
  auto child = Shell("echo one; printf 'two\\nthree'");
  EXPECT_THAT(child->ReadLine(kLong), IsOkAndHolds("one"));
  EXPECT_THAT(child->ReadLine(kLong), IsOkAndHolds("two"));
  // "three" has no newline: not a line.
  EXPECT_THAT(child->ReadLine(kLong), StatusIs(absl::StatusCode::kOutOfRange));
  EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(0));
}

TEST_F(ChildProcessTest, ReadLineTimesOutWhileTheChildIsQuietAndKeepsThePartialLine) {
  // The child prints half a line, then nothing.
  auto child = Shell("printf 'hal'; exec sleep 1000");
  EXPECT_THAT(child->ReadLine(absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(child->TryWait(), std::nullopt);
  child->Signal(SIGKILL);
  EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(128 + SIGKILL));
}

TEST_F(ChildProcessTest, ExitCodesAndSignals) {
  EXPECT_THAT(Shell("exit 3")->Wait(kLong), IsOkAndHolds(3));
  EXPECT_THAT(Shell("kill -TERM $$")->Wait(kLong), IsOkAndHolds(128 + SIGTERM));
}

TEST_F(ChildProcessTest, WaitTimesOutOnARunningChildAndTryWaitDoesNotBlock) {
  auto child = Shell("exec sleep 1000");
  EXPECT_THAT(child->Wait(absl::Milliseconds(20)), StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_EQ(child->TryWait(), std::nullopt);
  child->Signal(SIGTERM);
  EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(128 + SIGTERM));
  EXPECT_EQ(child->TryWait(), 128 + SIGTERM);
  child->Signal(SIGTERM);  // Exited: a no-op.
}

TEST_F(ChildProcessTest, StopSendsSigtermFirst) {
  // A loop of builtins (no grandchild to leave behind), which runs the trap between two.
  auto child = Shell("trap 'exit 7' TERM; echo armed; while :; do :; done");
  ASSERT_THAT(child->ReadLine(kLong), IsOkAndHolds("armed"));
  const ChildProcess::Stopped stopped = child->Stop(kLong);
  EXPECT_EQ(stopped.exit_code, 7);
  EXPECT_FALSE(stopped.killed);
}

TEST_F(ChildProcessTest, StopKillsAChildThatIgnoresSigterm) {
  auto child = Shell("trap '' TERM; echo armed; exec sleep 1000");
  ASSERT_THAT(child->ReadLine(kLong), IsOkAndHolds("armed"));
  const ChildProcess::Stopped stopped = child->Stop(absl::Milliseconds(100));
  EXPECT_EQ(stopped.exit_code, 128 + SIGKILL);
  EXPECT_TRUE(stopped.killed);
}

TEST_F(ChildProcessTest, TheChildStartsWithDefaultSignalsWhateverTheParentBlockedOrIgnored) {
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &block, &old_mask), 0);
  struct sigaction ignore {
  }, old_action{};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(::sigaction(SIGINT, &ignore, &old_action), 0);
  auto child = Shell("exec sleep 1000");
  ASSERT_EQ(::sigaction(SIGINT, &old_action, nullptr), 0);
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr), 0);
  // Ignored and blocked here, default there: either one ends it.
  child->Signal(SIGINT);
  EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(128 + SIGINT));
}

TEST_F(ChildProcessTest, StderrGoesToTheFile) {
  auto child = Shell("echo oops >&2; exit 1", dir_ + "/stderr.txt");
  EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(1));
  EXPECT_EQ(child->Stderr(), "oops\n");
}

TEST_F(ChildProcessTest, EnvironmentIsReplacedWhenGiven) {
  auto child = ChildProcess::Spawn(
      {.argv = {"/bin/sh", "-c", "echo \"$GREETING|$HOME\""}, .env = {{"GREETING=hi"}}});
  ASSERT_OK(child.status());
  EXPECT_THAT((*child)->ReadLine(kLong), IsOkAndHolds("hi|"));
}

TEST_F(ChildProcessTest, MissingProgramIsNotFound) {
  EXPECT_THAT(ChildProcess::Spawn({.argv = {dir_ + "/no-such-binary"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no-such-binary")));
  EXPECT_THAT(ChildProcess::Spawn({}), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST_F(ChildProcessTest, ForwardsTheRestOfStdoutToADescriptor) {
  const std::string path = dir_ + "/forwarded.txt";
  std::ofstream(path).close();
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  {
    auto child = Shell("echo first; echo second; printf third");
    ASSERT_THAT(child->ReadLine(kLong), IsOkAndHolds("first"));
    child->ForwardStdout(fd);
    EXPECT_THAT(child->ReadLine(kLong), StatusIs(absl::StatusCode::kFailedPrecondition));
    EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(0));
  }  // The destructor lets the forwarding finish.
  ::close(fd);
  std::ifstream in(path);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "second\nthird");
}

TEST_F(ChildProcessTest, DrainedChildNeverBlocksOnAFullPipe) {
  // Far more than a pipe holds (64 KiB), then a line on stderr once it got through.
  auto child = Shell("head -c 4000000 /dev/zero; echo done >&2", dir_ + "/stderr.txt");
  child->DrainStdout();
  EXPECT_THAT(child->Wait(kLong), IsOkAndHolds(0));
  EXPECT_EQ(child->Stderr(), "done\n");
}

TEST_F(ChildProcessTest, DestroyingARunningChildKillsIt) {
  pid_t pid = 0;
  {
    auto child = Shell("exec sleep 1000");
    child->DrainStdout();
    pid = child->pid();
  }
  // Reaped: the pid no longer names our child (kill fails, or hits nothing of ours).
  EXPECT_NE(::waitpid(pid, nullptr, WNOHANG), pid);
}

TEST_F(ChildProcessTest, PeakRssWhileRunningAndAfterExit) {
  auto child = Shell("echo up; exec sleep 1000");
  ASSERT_THAT(child->ReadLine(kLong), IsOkAndHolds("up"));
  EXPECT_GT(child->PeakRssBytes(), 0);
  child->Signal(SIGKILL);
  ASSERT_OK(child->Wait(kLong).status());
  EXPECT_GT(child->PeakRssBytes(), 0);
}

TEST_F(ChildProcessTest, RunToExitCollectsStdoutAndTheExitCode) {
  ASSERT_OK_AND_ASSIGN(RunResult r,
                       RunToExit({.argv = {"/bin/sh", "-c", "echo a; echo b; exit 4"}}, kLong));
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.stdout_text, "a\nb\n");
  EXPECT_THAT(RunToExit({.argv = {"/bin/sleep", "1000"}}, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

}  // namespace
}  // namespace moe::common::process
