// The load generator against the real cluster on loopback: `moe up` on the tiny preset (the
// gateway's OpenAI API in front of a router), driven by the serve benchmark's client.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

#include "bench/serve/serve_client.h"
#include "bench/serve/servers.h"
#include "bench/serve/workload.h"
#include "common/model/make_model.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::bench::serve {
namespace {

namespace fs = std::filesystem;
using ::moe::common::testing::IsOk;

class ServeProcessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const char* build = std::getenv("MOE_BUILD_DIR");
    ASSERT_NE(build, nullptr) << "run under ctest (MOE_BUILD_DIR)";
    dir_ = new std::string(
        (fs::path(::testing::TempDir()) / ("serve_process_test_" + std::to_string(getpid())))
            .string());
    fs::create_directories(*dir_);
    const std::string model = *dir_ + "/tiny";
    ASSERT_THAT(model::MakeModel({.preset = model::Preset::kTiny}, model), IsOk());
    auto s = StartCluster({.moe_binary = std::string(build) + "/bin/moe",
                           .model_dir = model,
                           .router_threads = 1,
                           .stderr_path = *dir_ + "/moe-up.log",
                           .work_dir = *dir_});
    ASSERT_THAT(s.status(), IsOk());
    server_ = new RunningServer(std::move(*s));
  }
  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Stop();
    delete server_;
    server_ = nullptr;
    if (dir_ != nullptr) fs::remove_all(*dir_);
    delete dir_;
  }
  static RunningServer* server_;
  static std::string* dir_;
};
RunningServer* ServeProcessTest::server_ = nullptr;
std::string* ServeProcessTest::dir_ = nullptr;

TEST_F(ServeProcessTest, ReadyLineNamesTheGatewayAndTheRoutersMetrics) {
  ASSERT_NE(server_, nullptr);
  EXPECT_GT(server_->port, 0);
  EXPECT_EQ(server_->model, "tiny");
  ASSERT_EQ(server_->router_metrics_ports.size(), 1u);
}

TEST_F(ServeProcessTest, ClosedLoopKeepsTheCapAndEveryStreamGetsItsTokens) {
  ASSERT_NE(server_, nullptr);
  auto reqs = RandomWorkload({.num_requests = 12,
                              .input_min = 4,
                              .input_max = 40,
                              .output_min = 3,
                              .output_max = 9,
                              .vocab_size = 512,
                              .seed = 2});
  ASSERT_THAT(reqs.status(), IsOk());
  const std::vector<RequestOutcome> out =
      RunWorkload(server_->port, server_->model, *reqs, {.max_concurrency = 3, .timeout_s = 120});
  ASSERT_EQ(out.size(), 12u);
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].ok) << i << ": " << out[i].error;
    EXPECT_EQ(out[i].output_tokens, (*reqs)[i].max_tokens) << i;  // usage, ignore_eos
    EXPECT_EQ(out[i].prompt_tokens, static_cast<int64_t>((*reqs)[i].prompt.size())) << i;
    EXPECT_FALSE(out[i].chunk_s.empty());
  }
  // At no send were more than 3 requests in flight (each request's own interval included).
  for (const RequestOutcome& a : out) {
    int in_flight = 0;
    for (const RequestOutcome& b : out) {
      if (b.send_s <= a.send_s && a.send_s < b.send_s + b.e2e_s) ++in_flight;
    }
    EXPECT_LE(in_flight, 3);
  }
  const ServeSummary s = Summarize(out, Slo{});
  EXPECT_EQ(s.completed, 12);
  EXPECT_GT(s.output_tok_s, 0);
}

TEST_F(ServeProcessTest, MultiTurnWaitsForThePreviousTurnAndHitsTheCache) {
  ASSERT_NE(server_, nullptr);
  auto reqs = MultiTurnWorkload({.num_chats = 2,
                                 .turns = 3,
                                 .system_tokens = 64,
                                 .user_tokens = 8,
                                 .output_tokens = 4,
                                 .vocab_size = 512,
                                 .seed = 3});
  ASSERT_THAT(reqs.status(), IsOk());
  const std::vector<double> at = PoissonArrivals(6, 20, 1, 4);
  (*reqs)[0].arrival_s = at[0];
  (*reqs)[3].arrival_s = at[1];
  const std::vector<RequestOutcome> out =
      RunWorkload(server_->port, server_->model, *reqs, {.max_concurrency = 0, .timeout_s = 120});
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(out[i].ok) << i << ": " << out[i].error;
    const int32_t after = (*reqs)[i].after;
    if (after >= 0) {
      EXPECT_GE(out[i].send_s, out[after].send_s + out[after].e2e_s) << i;
    } else {
      EXPECT_GE(out[i].send_s, (*reqs)[i].arrival_s) << i;
    }
  }
}

TEST_F(ServeProcessTest, ARejectedRequestIsAnOutcomeNotAHang) {
  ASSERT_NE(server_, nullptr);
  ServeRequest too_long{.prompt = std::vector<int32_t>(5000, 20), .max_tokens = 4};
  const std::vector<RequestOutcome> out =
      RunWorkload(server_->port, server_->model, {too_long}, {.timeout_s = 60});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].ok);
  EXPECT_EQ(out[0].error, "status 400");  // tiny's context is 4096 tokens
}

// Measure waits for the other system's spinning threads: while every CPU is busy SettleCpu
// waits its whole bound, and it never waits past it.
TEST(SettleCpuTest, WaitsItsWholeBoundWhileEveryCpuIsBusy) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) {
    spinners.emplace_back([&stop] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  const absl::Duration waited = SettleCpu(absl::Milliseconds(400));
  stop = true;
  for (std::thread& t : spinners) t.join();
  EXPECT_GE(waited, absl::Milliseconds(400));
  EXPECT_LT(waited, absl::Milliseconds(400 + 500));
}

}  // namespace
}  // namespace moe::bench::serve
