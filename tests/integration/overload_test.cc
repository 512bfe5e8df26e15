// Overload through the real gateway and router processes (issue 16 item 4), tiny preset: a flood
// at 10x the gateway's capacity (limits.max_in_flight) in front of a router whose own queue is
// smaller still. Every answer is either a complete stream with the unloaded run's text, or a
// refusal (503 for capacity, 429 for rate) carrying Retry-After; the gateway's generations in
// flight and the router's queue never exceed their configured bounds (read from /metrics while
// the flood runs); after the flood a request is served normally. Nothing here is timed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/http/http_client.h"
#include "common/model/make_model.h"
#include "common/process/child_process.h"
#include "common/process/listening.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/experts_cluster.h"

namespace moe::testing {
namespace {

using Json = nlohmann::json;

constexpr int kGatewayCapacity = 8;  // limits.max_in_flight
constexpr int kRouterSeqs = 2;       // core.scheduler.max_num_seqs
constexpr int kRouterWaiting = 2;    // core.scheduler.max_waiting
constexpr int kFlood = 10 * kGatewayCapacity;
constexpr int kMaxTokens = 48;

// The first sample of `family` (any labels) in a /metrics body; -1 when absent.
double Sample(const std::string& body, const std::string& family) {
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (!absl::StartsWith(line, family)) continue;
    absl::string_view rest = line.substr(family.size());
    if (rest.empty() || (rest[0] != '{' && rest[0] != ' ')) continue;  // a longer name
    const size_t space = rest.rfind(' ');
    double v = -1;
    if (space != absl::string_view::npos && absl::SimpleAtod(rest.substr(space + 1), &v)) return v;
  }
  return -1;
}

double Metric(int port, const std::string& family) {
  auto r = common::http::HttpCall(port, "GET", "/metrics");
  return r && r->status == 200 ? Sample(r->body, family) : -1;
}

struct Answer {
  int status = 0;
  std::string retry_after;
  bool done = false;  // a stream that ended with [DONE] and the chunked terminator
  std::string text;   // the streamed completion text
};

std::string Body(const std::vector<int32_t>& prompt) {
  return Json{{"model", "tiny"},  {"prompt", prompt},   {"max_tokens", kMaxTokens},
              {"temperature", 0}, {"ignore_eos", true}, {"stream", true}}
      .dump();
}

// One streaming completion on its own connection.
Answer Stream(int port, const std::vector<int32_t>& prompt) {
  Answer a;
  common::http::HttpClient client(port);
  if (!client.connected() || !client.Send("POST", "/v1/completions", Body(prompt))) return a;
  auto head = client.ReadHeaders();
  if (!head) return a;
  a.status = head->status;
  if (auto it = head->headers.find("retry-after"); it != head->headers.end()) {
    a.retry_after = it->second;
  }
  if (a.status != 200) return a;
  std::string sse;
  while (auto chunk = client.ReadChunk()) {
    if (chunk->empty()) {
      a.done = absl::StrContains(sse, "data: [DONE]");
      break;
    }
    sse += *chunk;
  }
  for (absl::string_view line : absl::StrSplit(sse, '\n')) {
    if (!absl::ConsumePrefix(&line, "data: ") || line == "[DONE]") continue;
    Json event = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (event.is_discarded() || !event.contains("choices") || event["choices"].empty()) continue;
    a.text += event["choices"][0].value("text", "");
  }
  return a;
}

class OverloadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("overload_test"));
    model_dir_ = new std::string(*dir_ + "/tiny");
    model::MakeModelOptions make;
    make.preset = model::Preset::kTiny;
    ASSERT_OK(model::MakeModel(make, *model_dir_));
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete model_dir_;
  }

  void SetUp() override {
    const std::string config = *dir_ + "/router.yaml";
    std::ofstream f(config);
    f << "core:\n  model_dir: \"" << *model_dir_ << "\"\n  num_threads: 1\n"
      << "  scheduler:\n    max_num_seqs: " << kRouterSeqs
      << "\n    max_waiting: " << kRouterWaiting
      << "\ngrpc:\n  host: 127.0.0.1\n  port: 0\n  drain_timeout: 1s\n"
      << "metrics:\n  host: 127.0.0.1\n  port: 0\n";
    f.close();
    auto router = LaunchService({BinPath("router"), "--config", config}, *dir_ + "/router.log");
    ASSERT_OK(router.status());
    router_ = *std::move(router);

    auto gw = common::process::ChildProcess::Spawn(
        {.argv = {BinPath("gateway"), "--set", "model_dir=" + *model_dir_, "--set",
                  "routing.routers=" + router_.address(), "--set", "http.host=127.0.0.1", "--set",
                  "http.port=0", "--set", absl::StrCat("limits.max_in_flight=", kGatewayCapacity),
                  "--set", "limits.retry_after_s=2"},
         .stderr_path = *dir_ + "/gateway.log"});
    ASSERT_OK(gw.status());
    gateway_ = *std::move(gw);
    auto ports = common::process::WaitForListeningLine(*gateway_, absl::Seconds(60));
    ASSERT_OK(ports.status());
    ASSERT_TRUE(ports->http.has_value());
    gateway_->DrainStdout();
    port_ = *ports->http;
    // Ready once it has seen the router (bounded wait).
    bool ready = false;
    for (int i = 0; i < 600 && !ready; ++i) {
      auto r = common::http::HttpCall(port_, "GET", "/readyz");
      ready = r && r->status == 200;
      if (!ready) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(ready) << gateway_->Stderr();
  }

  static std::vector<int32_t> Prompt(int i) {
    std::vector<int32_t> p;
    for (int k = 0; k < 12; ++k) p.push_back(3 + (i * 37 + k * 11) % 400);
    return p;
  }

  static std::string* dir_;
  static std::string* model_dir_;
  Proc router_;
  std::unique_ptr<common::process::ChildProcess> gateway_;
  int port_ = 0;
};

std::string* OverloadTest::dir_ = nullptr;
std::string* OverloadTest::model_dir_ = nullptr;

TEST_F(OverloadTest, AFloodAtTenTimesCapacityIsRefusedWithRetryAfterWithinBoundsAndRecovers) {
  constexpr int kPrompts = 4;
  std::vector<std::string> want;  // the unloaded text of each prompt
  for (int i = 0; i < kPrompts; ++i) {
    const Answer a = Stream(port_, Prompt(i));
    ASSERT_EQ(a.status, 200);
    ASSERT_TRUE(a.done);
    ASSERT_FALSE(a.text.empty());
    want.push_back(a.text);
  }

  // A monitor reads both services' queue gauges while the flood runs.
  std::atomic<bool> flooding{true};
  double max_gateway_running = 0, max_router_waiting = 0, max_router_running = 0;
  int samples = 0;
  std::thread monitor([&] {
    while (flooding.load()) {
      max_gateway_running = std::max(max_gateway_running, Metric(port_, "moe_requests_running"));
      max_router_waiting =
          std::max(max_router_waiting, Metric(router_.metrics_port, "moe_requests_waiting"));
      max_router_running =
          std::max(max_router_running, Metric(router_.metrics_port, "moe_requests_running"));
      ++samples;
    }
  });

  std::vector<Answer> answers(kFlood);
  std::atomic<int> arrived{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kFlood; ++i) {
    clients.emplace_back([&, i] {
      arrived.fetch_add(1);
      while (arrived.load() < kFlood) std::this_thread::yield();  // all at once
      answers[i] = Stream(port_, Prompt(i % kPrompts));
    });
  }
  for (std::thread& t : clients) t.join();
  flooding.store(false);
  monitor.join();

  int served = 0, refused = 0;
  for (int i = 0; i < kFlood; ++i) {
    const Answer& a = answers[i];
    if (a.status == 200) {
      ++served;
      EXPECT_TRUE(a.done) << i;
      EXPECT_EQ(a.text, want[i % kPrompts]) << i;
    } else {
      ++refused;
      EXPECT_TRUE(a.status == 503 || a.status == 429) << i << ": " << a.status;
      EXPECT_EQ(a.retry_after, "2") << i;
    }
  }
  std::printf(
      "overload: %d requests, %d served, %d refused; peaks: gateway running %.0f/%d, "
      "router running %.0f/%d, waiting %.0f/%d (%d samples)\n",
      kFlood, served, refused, max_gateway_running, kGatewayCapacity, max_router_running,
      kRouterSeqs, max_router_waiting, kRouterWaiting, samples);
  EXPECT_GT(served, 0);
  EXPECT_GT(refused, 0);  // 10x the capacity at once
  EXPECT_GT(samples, 0);
  EXPECT_LE(max_gateway_running, kGatewayCapacity);
  EXPECT_LE(max_router_running, kRouterSeqs);
  EXPECT_LE(max_router_waiting, kRouterWaiting);

  // The flood is over: served normally, with the same text.
  for (int i = 0; i < kPrompts; ++i) {
    const Answer a = Stream(port_, Prompt(i));
    EXPECT_EQ(a.status, 200) << i;
    EXPECT_TRUE(a.done) << i;
    EXPECT_EQ(a.text, want[i]) << i;
  }
  // Every slot is given back (once the last bytes have left: a bounded wait, not a timing).
  double running = -1;
  for (int i = 0; i < 400 && running != 0; ++i) {
    running = Metric(port_, "moe_requests_running");
    if (running != 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_EQ(running, 0);
}

}  // namespace
}  // namespace moe::testing
