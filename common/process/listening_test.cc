#include "common/process/listening.h"

#include <string>

#include "common/process/process_test_util.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::process {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kLong;
using testing::Shell;

TEST(ListeningLineTest, ParsesThePortsItHas) {
  ASSERT_OK_AND_ASSIGN(ListeningPorts p,
                       ParseListeningLine(R"({"event":"listening","grpc":5000,"metrics":5001})"));
  EXPECT_EQ(p.grpc, 5000);
  EXPECT_EQ(p.http, std::nullopt);
  EXPECT_EQ(p.metrics, 5001);
}

TEST(ListeningLineTest, RejectsOtherLines) {
  for (const char* line :
       {"", "hello", "[1,2]", R"({"event":"ready","http":80})",
        R"({"event":"listening","http":"80"})", R"({"event":"listening","grpc":0})"}) {
    EXPECT_THAT(ParseListeningLine(line), StatusIs(absl::StatusCode::kInvalidArgument)) << line;
  }
}

TEST(ListeningLineTest, WaitSkipsEarlierLines) {
  auto child = Shell(R"(echo starting; echo '{"event":"listening","http":8080}'; exec sleep 1000)");
  std::vector<std::string> others;
  ASSERT_OK_AND_ASSIGN(
      ListeningPorts p,
      WaitForListeningLine(*child, kLong, [&](const std::string& l) { others.push_back(l); }));
  EXPECT_EQ(p.http, 8080);
  EXPECT_THAT(others, ElementsAre("starting"));
}

TEST(ListeningLineTest, WaitReportsAChildThatExitsFirst) {
  auto child = Shell("echo nope; exit 2");
  EXPECT_THAT(WaitForListeningLine(*child, kLong),
              StatusIs(absl::StatusCode::kOutOfRange, HasSubstr("exited with code 2")));
}

TEST(ListeningLineTest, WaitTimesOut) {
  auto child = Shell("exec sleep 1000");
  EXPECT_THAT(WaitForListeningLine(*child, absl::Milliseconds(50)),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
}

}  // namespace
}  // namespace moe::common::process
