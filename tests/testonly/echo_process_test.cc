// Starts moe_testonly_echo as a separate process, as a launcher would, and checks the contract
// every service keeps (DESIGN.md §3): the listening line on port 0, grpc.health.v1, /metrics on
// its own port, a clean drain and exit 0 on SIGTERM; and bad config -> non-zero exit, nothing
// started, an error naming the key.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/base/check.h"
#include "common/grpc/channel_factory.h"
#include "common/process/child_process.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "tests/testonly/echo.grpc.pb.h"

namespace moe::testonly {
namespace {

using ::moe::common::process::ChildProcess;
using ::moe::common::testing::IsOkAndHolds;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string EchoBinary() {
  const char* build = std::getenv("MOE_BUILD_DIR");
  return std::string(build ? build : ".") + "/bin/moe_testonly_echo";
}

class EchoProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = common::testing::MakeTempDir("echo_process_test"); }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ChildProcess> Start(std::vector<std::string> args) {
    args.insert(args.begin(), EchoBinary());
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Spawn({.argv = std::move(args), .stderr_path = dir_ + "/stderr.txt"});
    MOE_CHECK_OK(child.status());
    return *std::move(child);
  }

  // Scrapes /metrics and returns the value of the unlabelled series `name`, or -1.
  static double Scrape(int port, const std::string& name) {
    httplib::Client client("127.0.0.1", port);
    httplib::Result res = client.Get("/metrics");
    if (!res || res->status != 200) return -1;
    const std::string needle = "\n" + name + " ";
    const size_t at = res->body.find(needle);
    if (at == std::string::npos) return -1;
    return std::stod(res->body.substr(at + needle.size()));
  }

  std::string dir_;
};

TEST_F(EchoProcessTest, ServesHealthEchoAndMetricsThenDrainsOnSigterm) {
  std::unique_ptr<ChildProcess> child =
      Start({"--set", "grpc.host=127.0.0.1", "--set", "metrics.host=127.0.0.1", "--grpc_port", "0",
             "--metrics_port=0", "--set", "prefix=echo: ", "--set", "grpc.drain_timeout=5s"});
  ASSERT_OK_AND_ASSIGN(std::string line, child->ReadLine(absl::Seconds(20)));
  const nlohmann::json listening = nlohmann::json::parse(line);
  EXPECT_EQ(listening["event"], "listening");
  EXPECT_FALSE(listening.contains("http"));  // Only the ports the process has.
  const int grpc_port = listening["grpc"];
  const int metrics_port = listening["metrics"];
  ASSERT_GT(grpc_port, 0);
  ASSERT_GT(metrics_port, 0);

  ASSERT_OK_AND_ASSIGN(auto channel,
                       common::rpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port)));
  EXPECT_THAT(common::rpc::CheckServing(*channel, "", absl::Seconds(5)), IsOkAndHolds(true));
  EXPECT_THAT(common::rpc::CheckServing(*channel, "moe.testonly.v1.Echo", absl::Seconds(5)),
              IsOkAndHolds(true));

  auto stub = v1::Echo::NewStub(channel);
  {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    v1::EchoRequest req;
    req.set_message("hello");
    v1::EchoResponse res;
    ASSERT_TRUE(stub->Echo(&ctx, req, &res).ok());
    EXPECT_EQ(res.message(), "echo: hello");
  }
  EXPECT_EQ(Scrape(metrics_port, "moe_testonly_echo_requests_total"), 1);
  {
    httplib::Result health = httplib::Client("127.0.0.1", metrics_port).Get("/healthz");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
  }

  // A call in flight when SIGTERM arrives still completes: the drain waits for it.
  ::grpc::Status slow_status;
  v1::EchoResponse slow_res;
  std::thread slow([&] {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    v1::EchoRequest req;
    req.set_message("slow");
    req.set_delay_ms(500);
    slow_status = stub->Echo(&ctx, req, &slow_res);
  });
  // The in-flight gauge says when the server is inside the call.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (Scrape(metrics_port, "moe_testonly_echo_in_flight") != 1 && absl::Now() < give_up) {
  }
  ASSERT_EQ(Scrape(metrics_port, "moe_testonly_echo_in_flight"), 1);

  const absl::Time sigterm_at = absl::Now();
  child->Signal(SIGTERM);
  EXPECT_THAT(child->Wait(absl::Seconds(5 + 3)), IsOkAndHolds(0)) << child->Stderr();
  const absl::Duration exit_after = absl::Now() - sigterm_at;
  slow.join();
  EXPECT_TRUE(slow_status.ok()) << slow_status.error_message();
  EXPECT_EQ(slow_res.message(), "echo: slow");
  EXPECT_LT(exit_after, absl::Seconds(5));  // Within the drain deadline.
  EXPECT_THAT(child->Stderr(), HasSubstr("draining"));
  EXPECT_THAT(child->ReadLine(absl::Seconds(1)),
              common::testing::StatusIs(absl::StatusCode::kOutOfRange));  // One line only.
}

TEST_F(EchoProcessTest, FixedPortsPrintNoListeningLine) {
  const int grpc_port = common::testing::PickFreePort();
  const int metrics_port = common::testing::PickFreePort();
  std::unique_ptr<ChildProcess> child =
      Start({"--set", "grpc.host=127.0.0.1", "--set", "metrics.host=127.0.0.1", "--grpc_port",
             std::to_string(grpc_port), "--metrics_port", std::to_string(metrics_port)});
  ASSERT_OK_AND_ASSIGN(auto channel,
                       common::rpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port)));
  // Ready once health answers (the channel waits for the server to come up).
  ASSERT_TRUE(channel->WaitForConnected(absl::ToChronoTime(absl::Now() + absl::Seconds(20))));
  EXPECT_THAT(common::rpc::CheckServing(*channel, "", absl::Seconds(5)), IsOkAndHolds(true));
  // Close the connection first: an idle client in a process that is not polling acks the
  // server's GOAWAY only on gRPC's 5 s backup poll, which would stretch the drain to ~5 s.
  channel.reset();
  child->Signal(SIGTERM);
  EXPECT_THAT(child->Wait(absl::Seconds(15)), IsOkAndHolds(0)) << child->Stderr();
  EXPECT_THAT(child->ReadLine(absl::Seconds(1)),
              common::testing::StatusIs(absl::StatusCode::kOutOfRange));
}

struct BadConfigCase {
  std::string name;
  std::string yaml;               // Written to a --config file when non-empty.
  std::vector<std::string> args;  // Extra flags.
  std::vector<std::string> stderr_has;
};

class EchoBadConfigTest : public EchoProcessTest,
                          public ::testing::WithParamInterface<BadConfigCase> {};

TEST_P(EchoBadConfigTest, ExitsNonZeroWithoutStartingAndNamesTheKey) {
  const BadConfigCase& c = GetParam();
  std::vector<std::string> args = {"--grpc_port", "0", "--metrics_port", "0"};
  if (!c.yaml.empty()) {
    const std::string path = dir_ + "/echo.yaml";
    std::ofstream(path) << c.yaml;
    args.insert(args.end(), {"--config", path});
  }
  args.insert(args.end(), c.args.begin(), c.args.end());
  std::unique_ptr<ChildProcess> child = Start(args);
  EXPECT_THAT(child->Wait(absl::Seconds(15)), IsOkAndHolds(2));
  // Nothing started: no listening line.
  EXPECT_THAT(child->ReadLine(absl::Seconds(1)),
              common::testing::StatusIs(absl::StatusCode::kOutOfRange));
  for (const std::string& s : c.stderr_has) EXPECT_THAT(child->Stderr(), HasSubstr(s));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EchoBadConfigTest,
    ::testing::Values(
        BadConfigCase{.name = "UnknownKeyInFile",
                      .yaml = "grpc:\n  drain_timeout: 1s\n  prot: 5\n",
                      .stderr_has = {"unknown key \"grpc.prot\"", "(value \"5\")", "echo.yaml:3"}},
        BadConfigCase{.name = "WrongTypeInSet",
                      .args = {"--set", "grpc.drain_timeout=soon"},
                      .stderr_has = {"grpc.drain_timeout: \"soon\" is not a valid duration"}},
        BadConfigCase{.name = "WrongTypeInFile",
                      .yaml = "metrics:\n  port: eighty\n",
                      .stderr_has = {"metrics.port: \"eighty\" is not a valid int32"}},
        BadConfigCase{.name = "OutOfRange",
                      .args = {"--set", "max_message_bytes=0"},
                      .stderr_has = {"max_message_bytes: 0 is out of range [1, 1048576]"}},
        BadConfigCase{.name = "OutOfRangeInSection",
                      .args = {"--grpc_port", "70000"},
                      .stderr_has = {"grpc.port: 70000 is out of range [0, 65535]"}},
        BadConfigCase{.name = "UnknownFlag",
                      .args = {"--grpc-port", "1"},
                      .stderr_has = {"unknown flag --grpc-port"}}),
    [](const ::testing::TestParamInfo<BadConfigCase>& info) { return info.param.name; });

}  // namespace
}  // namespace moe::testonly
