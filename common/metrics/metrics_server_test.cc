#include "common/metrics/metrics_server.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace moe::common::metrics {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

MetricsServerOptions Loopback(int port = 0) { return {.host = "127.0.0.1", .port = port}; }

TEST(MetricsServerTest, ServesMetricsOverLoopbackOnAChosenPort) {
  Registry registry;
  Counter& scrapes = registry.AddCounter("moe_test_events_total", "Events.");
  scrapes.Increment(2);
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(Loopback(), registry));
  ASSERT_GT(server->port(), 0);

  httplib::Client client("127.0.0.1", server->port());
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_THAT(res->body, HasSubstr("\nmoe_test_events_total 2\n"));

  scrapes.Increment();
  res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("\nmoe_test_events_total 3\n"));
}

// metrics.bearer_token_file: a scrape without the token (or with another) is 401, with it 200;
// /healthz stays open for probes.
TEST(MetricsServerTest, ABearerTokenFileProtectsMetricsButNotHealthz) {
  const std::string path = ::testing::TempDir() + "/metrics_token";
  {
    std::ofstream f(path);
    f << "s3cret-token\n";
  }
  Registry registry;
  registry.AddCounter("moe_test_events_total", "Events.").Increment();
  MetricsServerOptions options = Loopback();
  options.bearer_token_file = path;
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(options, registry));
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(res->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_THAT(res->body, ::testing::Not(HasSubstr("moe_test_events_total")));
  res = client.Get("/metrics", {{"Authorization", "Bearer wrong"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = client.Get("/metrics", {{"Authorization", "Bearer s3cret-token"}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_THAT(res->body, HasSubstr("moe_test_events_total 1"));
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);

  options.bearer_token_file = ::testing::TempDir() + "/no_such_token_file";
  EXPECT_THAT(MetricsServer::Start(options, registry).status(),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(MetricsServerTest, HealthzFollowsTheHealthCallback) {
  Registry registry;
  std::atomic<bool> healthy{true};
  ASSERT_OK_AND_ASSIGN(auto server,
                       MetricsServer::Start(Loopback(), registry, [&] { return healthy.load(); }));
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  healthy = false;
  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503);
  res = client.Get("/nope");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

TEST(MetricsServerTest, StopIsPromptEvenAfterAScrape) {
  Registry registry;
  ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(Loopback(), registry));
  httplib::Client client("127.0.0.1", server->port());
  client.set_keep_alive(true);  // A scraper that would like to keep its connection.
  ASSERT_TRUE(client.Get("/metrics"));
  const auto start = std::chrono::steady_clock::now();
  server->Stop();
  // prometheus-cpp's civetweb Exposer needs ~2 s here; this server must not.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  server->Stop();  // Idempotent.
  EXPECT_FALSE(httplib::Client("127.0.0.1", server->port()).Get("/metrics"));
}

TEST(MetricsServerTest, StopRightAfterStartReturns) {
  Registry registry;
  for (int i = 0; i < 20; ++i) {
    ASSERT_OK_AND_ASSIGN(auto server, MetricsServer::Start(Loopback(), registry));
    server->Stop();
  }
}

TEST(MetricsServerTest, PortInUseIsUnavailable) {
  Registry registry;
  ASSERT_OK_AND_ASSIGN(auto first, MetricsServer::Start(Loopback(), registry));
  EXPECT_THAT(MetricsServer::Start(Loopback(first->port()), registry),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot bind")));
}

TEST(MetricsServerTest, InvalidOptionsAreRejected) {
  Registry registry;
  EXPECT_THAT(MetricsServer::Start(Loopback(70000), registry),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("port: 70000")));
}

}  // namespace
}  // namespace moe::common::metrics
