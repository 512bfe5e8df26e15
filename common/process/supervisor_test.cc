#include "common/process/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/process/process_test_util.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::process {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kLong;

// A member that prints a line, its listening line (http = `port`), another line, and then runs
// until a signal ends it (SIGTERM is ignored when `ignore_term`: it survives until SIGKILL).
SpawnOptions Service(int port, bool ignore_term = false) {
  return {.argv = {"/bin/sh", "-c",
                   absl::StrCat(ignore_term ? "trap '' TERM; " : "",
                                "echo hello; echo '{\"event\":\"listening\",\"http\":", port,
                                "}'; echo after; exec sleep 1000")}};
}

class SupervisorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = common::testing::MakeTempDir("supervisor_test");
    out_path_ = dir_ + "/out.txt";
    out_fd_ = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(out_fd_, 0);
  }
  void TearDown() override {
    ::close(out_fd_);
    std::filesystem::remove_all(dir_);
  }
  SupervisorOptions Options() {
    return {.stop_grace = kLong, .output_fd = out_fd_, .log = [this](const std::string& line) {
              log_.push_back(line);
            }};
  }
  std::string Output() {
    std::ifstream in(out_path_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::string dir_, out_path_;
  int out_fd_ = -1;
  std::vector<std::string> log_;
};

TEST_F(SupervisorTest, StartsInOrderAndStopsInReverse) {
  {
    Supervisor group(Options());
    ASSERT_OK_AND_ASSIGN(const Supervisor::Member* a, group.Start("a-0", Service(1001), kLong));
    ASSERT_OK_AND_ASSIGN(const Supervisor::Member* b, group.Start("b-0", Service(1002), kLong));
    EXPECT_EQ(a->ports.http, 1001);
    EXPECT_EQ(b->ports.http, 1002);
    ASSERT_EQ(group.members().size(), 2u);
    group.StopAll();
    EXPECT_EQ(a->child->TryWait(), 128 + SIGTERM);
    EXPECT_EQ(b->child->TryWait(), 128 + SIGTERM);
  }
  EXPECT_THAT(log_, ElementsAre("stopping b-0", "stopping a-0"));
  // Lines before the listening line are labelled; the rest is copied as it is.
  const std::string out = Output();
  EXPECT_THAT(out, HasSubstr("[a-0] hello\n"));
  EXPECT_THAT(out, HasSubstr("[b-0] hello\n"));
  EXPECT_THAT(out, HasSubstr("after\n"));
  EXPECT_THAT(out, ::testing::Not(HasSubstr("listening")));
}

TEST_F(SupervisorTest, StartFailsWhenTheChildExitsBeforeListening) {
  Supervisor group(Options());
  EXPECT_THAT(group.Start("x-0", {.argv = {"/bin/sh", "-c", "exit 3"}}, kLong),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("x-0 exited with code 3")));
  EXPECT_THAT(group.Start("y-0", {.argv = {dir_ + "/missing"}}, kLong),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("y-0: ")));
  EXPECT_TRUE(group.members().empty());
}

TEST_F(SupervisorTest, StopKillsAMemberThatIgnoresSigterm) {
  Supervisor group({.stop_grace = absl::Milliseconds(100), .output_fd = -1, .log = Options().log});
  ASSERT_OK_AND_ASSIGN(const Supervisor::Member* m,
                       group.Start("stubborn-0", Service(1001, /*ignore_term=*/true), kLong));
  group.StopAll();
  EXPECT_EQ(m->child->TryWait(), 128 + SIGKILL);
  EXPECT_THAT(log_,
              ElementsAre("stopping stubborn-0", "stubborn-0 did not stop in time; killing it"));
}

TEST_F(SupervisorTest, WaitReadyProbesUntilTrue) {
  Supervisor group(Options());
  ASSERT_OK_AND_ASSIGN(const Supervisor::Member* m, group.Start("a-0", Service(1001), kLong));
  int calls = 0;
  EXPECT_OK(group.WaitReady(
      *m, [&]() -> absl::StatusOr<bool> { return ++calls == 3; }, absl::Now() + kLong,
      absl::Milliseconds(1)));
  EXPECT_EQ(calls, 3);
  EXPECT_THAT(group.WaitReady(
                  *m, []() -> absl::StatusOr<bool> { return absl::UnavailableError("no"); },
                  absl::Now() + absl::Milliseconds(20), absl::Milliseconds(1)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, "a-0 is not ready in time"));
}

TEST_F(SupervisorTest, WaitReadyEndsWhenTheMemberExits) {
  Supervisor group(Options());
  ASSERT_OK_AND_ASSIGN(const Supervisor::Member* m, group.Start("a-0", Service(1001), kLong));
  m->child->Signal(SIGKILL);
  EXPECT_THAT(group.WaitReady(
                  *m, [] { return absl::StatusOr<bool>(false); }, absl::Now() + kLong, kLong),
              StatusIs(absl::StatusCode::kOutOfRange, "a-0 exited before it was ready"));
}

TEST_F(SupervisorTest, WaitReportsAMemberThatExits) {
  Supervisor group(Options());
  ASSERT_OK(group.Start("a-0", Service(1001), kLong).status());
  ASSERT_OK_AND_ASSIGN(const Supervisor::Member* b, group.Start("b-0", Service(1002), kLong));
  b->child->Signal(SIGKILL);
  const Supervisor::Event e = group.WaitForSignalOrExit({SIGUSR1});
  EXPECT_EQ(e.signal, 0);
  EXPECT_EQ(e.exited, b);
  EXPECT_EQ(e.exit_code, 128 + SIGKILL);
  group.StopAll();
  EXPECT_THAT(log_, ElementsAre("stopping a-0"));  // b-0 is gone already
}

TEST_F(SupervisorTest, WaitTakesABlockedSignal) {
  // Blocked before any member (and its forwarding thread) exists, as a main does.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &set, &old), 0);
  {
    Supervisor group(Options());
    ASSERT_OK(group.Start("a-0", Service(1001), kLong).status());
    ASSERT_EQ(::kill(::getpid(), SIGUSR1), 0);
    const Supervisor::Event e = group.WaitForSignalOrExit({SIGINT, SIGUSR1});
    EXPECT_EQ(e.signal, SIGUSR1);
    EXPECT_EQ(e.exited, nullptr);
  }
  ASSERT_EQ(::pthread_sigmask(SIG_SETMASK, &old, nullptr), 0);
}

}  // namespace
}  // namespace moe::common::process
