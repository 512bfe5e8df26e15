// The HTTP server with the real Gateway core and the fake backend, over loopback.
#include "services/gateway/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/base/clock.h"
#include "common/http/http_client.h"
#include "common/metrics/registry.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/gateway.h"
#include "services/gateway/testing/fake_backend.h"
#include "services/gateway/testing/slow_client.h"
#include "services/gateway/testing/test_tokenizer.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using common::http::HttpCall;
using testing::FakeBackend;
using testing::FakeBackendOptions;
using ::testing::HasSubstr;
using testing::SendCompletionWithoutReading;
using HttpTestClient = common::http::HttpClient;

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(FakeBackendOptions fb = {}, GatewayOptions options = {}) {
    backend_ = std::make_unique<FakeBackend>(std::move(fb));
    options.model_dir = "/unused";
    options.http.host = "127.0.0.1";
    options.http.port = 0;
    auto gw =
        Gateway::Create(options, ModelInfo{"tiny", model_len_, 0},
                        GatewayDeps{*tokenizer_, *backend_, common::SystemClock::Get(), registry_});
    ASSERT_OK(gw.status());
    gateway_ = std::move(gw).value();
    auto server = ServeGateway(options.http, *gateway_);
    ASSERT_OK(server.status());
    server_ = std::move(server).value();
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (backend_) backend_->Release();
    if (backend_) backend_->WaitForIdle(absl::Seconds(10));
  }

  std::unique_ptr<tokenizer::Tokenizer> tokenizer_ = testing::MakeTestTokenizer();
  common::metrics::Registry registry_;
  std::unique_ptr<FakeBackend> backend_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
  int32_t model_len_ = 512;
};

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  Start();
  HttpTestClient client(port_);
  ASSERT_TRUE(client.connected());
  auto health = client.Request("GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok\n");
  for (int i = 0; i < 3; ++i) {
    auto r = client.Request("POST", "/v1/completions",
                            R"({"model":"tiny","prompt":"hello","max_tokens":3})");
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(r->headers["content-type"], "application/json");
    EXPECT_EQ(Json::parse(r->body)["usage"]["completion_tokens"], 3);
  }
  auto models = client.Request("GET", "/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["max_model_len"], 512);
}

TEST_F(HttpServerTest, StreamsServerSentEventsEndingWithDone) {
  Start();
  auto r = HttpCall(port_, "POST", "/v1/chat/completions",
                    R"({"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":4,
                        "stream":true})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->headers["content-type"], "text/event-stream; charset=utf-8");
  EXPECT_EQ(r->headers["transfer-encoding"], "chunked");
  EXPECT_THAT(r->body, ::testing::StartsWith("data: {"));
  EXPECT_THAT(r->body, ::testing::EndsWith("data: [DONE]\n\n"));
  EXPECT_THAT(r->body, HasSubstr(R"("finish_reason":"length")"));
}

TEST_F(HttpServerTest, ClientDisconnectCancelsAStreamAtOnce) {
  FakeBackendOptions fb;
  fb.hold_after_tokens = 3;  // <s>, "▁", "a": the first chunk carries "a".
  Start(fb);
  HttpTestClient client(port_);
  ASSERT_TRUE(client.Send("POST", "/v1/completions",
                          R"({"model":"tiny","prompt":"abc","max_tokens":50,"stream":true})"));
  auto headers = client.ReadHeaders();
  ASSERT_TRUE(headers);
  EXPECT_EQ(headers->status, 200);
  auto first = client.ReadChunk();
  ASSERT_TRUE(first);
  EXPECT_THAT(*first, HasSubstr("data: "));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  client.Close();
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_TRUE(backend_->WaitForIdle(absl::Seconds(10)));
  // The slot is free and the server goes on.
  auto health = HttpCall(port_, "GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

// A client that sends a streaming request and then never reads: the bytes queued for it stay
// within http.max_pending_write_bytes; past it the connection is closed and the generation
// cancelled, so neither memory nor the in-flight slot is pinned by the client.
TEST_F(HttpServerTest, AClientThatStopsReadingIsCutOffAndItsGenerationCancelled) {
  FakeBackendOptions fb;
  GatewayOptions options;
  options.http.max_pending_write_bytes = 4096;
  options.http.write_timeout = absl::Milliseconds(200);
  // A stream (~7 MB) larger than what the kernel buffers between the two sockets (tcp_wmem's
  // 4 MiB at most plus a small receive buffer).
  model_len_ = 40000;
  Start(fb, options);
  const int fd = SendCompletionWithoutReading(
      port_, R"({"model":"tiny","prompt":"abc","max_tokens":20000,"stream":true,"logprobs":5})");
  ASSERT_GE(fd, 0);
  // Never read: the server must give up on us and cancel the stream before it completes.
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(30)));
  EXPECT_TRUE(backend_->WaitForIdle(absl::Seconds(10)));
  EXPECT_EQ(gateway_->metrics().slow_clients_closed_total.Value(), 1);
  // Reading now drains what the kernel held, then the connection ends (EOF or reset) without the
  // final chunk.
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, n);
  ::close(fd);
  EXPECT_FALSE(absl::EndsWith(got, "0\r\n\r\n")) << got.size() << " bytes, the whole stream";
  // The server goes on.
  auto health = HttpCall(port_, "GET", "/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(HttpServerTest, ClientDisconnectCancelsANonStreamRequest) {
  FakeBackendOptions fb;
  fb.hold_after_tokens = 1;
  Start(fb);
  {
    HttpTestClient client(port_);
    ASSERT_TRUE(client.Send("POST", "/v1/completions",
                            R"({"model":"tiny","prompt":"abc","max_tokens":50})"));
    ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  }
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(10)));
}

TEST_F(HttpServerTest, BadInputGetsTheRightStatusAndTheServerKeepsServing) {
  GatewayOptions options;
  options.http.max_body_bytes = 4096;
  Start({}, options);
  struct Case {
    std::string name, body;
    int status;
  };
  const std::vector<Case> cases = {
      {"malformed json", "{\"model\":", 400},
      {"wrong type", R"({"model":"tiny","prompt":"x","temperature":"warm"})", 400},
      {"unknown model", R"({"model":"nope","prompt":"x"})", 404},
      {"negative max_tokens", R"({"model":"tiny","prompt":"x","max_tokens":-1})", 400},
      {"oversize body", R"({"model":"tiny","prompt":")" + std::string(8000, 'a') + R"("})", 413},
      {"prompt over context", R"({"model":"tiny","prompt":")" + std::string(1000, 'a') + R"("})",
       400},
  };
  GatewayOptions small;
  for (const Case& c : cases) {
    auto r = HttpCall(port_, "POST", "/v1/completions", c.body);
    ASSERT_TRUE(r) << c.name;
    EXPECT_EQ(r->status, c.status) << c.name << ": " << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << c.name << ": " << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string()) << c.name;
    EXPECT_TRUE(j["error"]["type"].is_string()) << c.name;
    EXPECT_TRUE(j["error"].contains("param")) << c.name;
    EXPECT_TRUE(j["error"].contains("code")) << c.name;
  }
  auto garbage = HttpTestClient(port_);
  ASSERT_TRUE(garbage.SendRaw("NOT HTTP AT ALL\r\n\r\n"));
  auto g = garbage.Read();
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 400);
  auto ok =
      HttpCall(port_, "POST", "/v1/completions", R"({"model":"tiny","prompt":"x","max_tokens":2})");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// Waits (bounded, not a timed assertion) until `pred` holds.
bool Eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

TEST_F(HttpServerTest, DrainLetsInFlightStreamsFinishAndRefusesNewOnes) {
  FakeBackendOptions fb;
  fb.hold_after_tokens = 1;
  Start(fb);
  HttpTestClient client(port_);
  ASSERT_TRUE(client.Send("POST", "/v1/completions",
                          R"({"model":"tiny","prompt":"abc","max_tokens":4,"stream":true})"));
  ASSERT_TRUE(client.ReadHeaders());
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  gateway_->StartDrain();
  auto refused = HttpCall(port_, "POST", "/v1/completions", R"({"model":"tiny","prompt":"x"})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->headers["retry-after"], "1");
  backend_->Release();
  std::string rest;
  for (;;) {
    auto chunk = client.ReadChunk();
    ASSERT_TRUE(chunk);
    if (chunk->empty()) break;
    rest += *chunk;
  }
  EXPECT_THAT(rest, ::testing::EndsWith("data: [DONE]\n\n"));
  // The slot is released once the last bytes have left for the socket (WhenFlushed), which the
  // server learns just after the client can read them.
  EXPECT_TRUE(Eventually([&] { return gateway_->in_flight() == 0; }));
}

TEST_F(HttpServerTest, MetricsAreServedOnTheHttpPort) {
  Start();
  ASSERT_TRUE(HttpCall(port_, "GET", "/v1/models"));
  auto r = HttpCall(port_, "GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("moe_gateway_http_responses_total{code=\"200\"}"));
  EXPECT_THAT(r->body, HasSubstr("moe_gateway_connections_open"));
}

TEST_F(HttpServerTest, StopClosesOpenStreams) {
  FakeBackendOptions fb;
  fb.hold_after_tokens = 1;
  Start(fb);
  HttpTestClient client(port_);
  ASSERT_TRUE(client.Send("POST", "/v1/completions",
                          R"({"model":"tiny","prompt":"abc","max_tokens":4,"stream":true})"));
  ASSERT_TRUE(backend_->WaitForHeld(1, absl::Seconds(10)));
  server_->Stop();
  EXPECT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(10)));
  EXPECT_EQ(server_->open_connections(), 0);
}

// A slow reader whose generation has already ended keeps its in-flight slot until its bytes have
// drained: the slot bounds what the gateway holds for clients, not just what routers compute.
TEST_F(HttpServerTest, ASlowClientHoldsItsInFlightSlotUntilItsBytesDrain) {
  GatewayOptions options;
  options.limits.max_in_flight = 1;
  options.limits.retry_after_s = 3;
  options.http.max_pending_write_bytes = 64 << 20;  // the whole stream fits: no cut
  options.http.write_timeout = absl::Seconds(60);
  model_len_ = 40000;
  Start(FakeBackendOptions{}, options);
  const int fd = SendCompletionWithoutReading(
      port_, R"({"model":"tiny","prompt":"abc","max_tokens":20000,"stream":true,"logprobs":5})");
  ASSERT_GE(fd, 0);
  // The generation ends (every byte is queued in the gateway or the kernel)...
  ASSERT_TRUE(Eventually([&] { return backend_->num_started() == 1; }));
  ASSERT_TRUE(backend_->WaitForIdle(absl::Seconds(30)));
  EXPECT_EQ(backend_->num_cancelled(), 0);
  // ...but the client has not read it: the slot is still taken.
  EXPECT_EQ(gateway_->metrics().requests_running.Value(), 1);
  auto refused = HttpCall(port_, "POST", "/v1/completions",
                          R"({"model":"tiny","prompt":"abc","max_tokens":2})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->headers["retry-after"], "3");
  // The client reads everything: the whole stream arrives, then the slot is free.
  std::string got;
  char buf[1 << 16];
  while (!absl::EndsWith(got, "0\r\n\r\n")) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, n);
  }
  EXPECT_TRUE(absl::EndsWith(got, "data: [DONE]\n\n\r\n0\r\n\r\n")) << got.size() << " bytes";
  EXPECT_GT(got.size(), 4u << 20);  // more than the kernel buffers: the gateway held the rest
  EXPECT_TRUE(Eventually([&] { return gateway_->metrics().requests_running.Value() == 0; }));
  auto served = HttpCall(port_, "POST", "/v1/completions",
                         R"({"model":"tiny","prompt":"abc","max_tokens":2})");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  ::close(fd);
  EXPECT_EQ(gateway_->metrics().slow_clients_closed_total.Value(), 0);
}

// A slow reader that is cut (past max_pending_write_bytes) frees its slot at once.
TEST_F(HttpServerTest, ASlowClientThatIsCutFreesItsSlot) {
  GatewayOptions options;
  options.limits.max_in_flight = 1;
  options.http.max_pending_write_bytes = 4096;
  options.http.write_timeout = absl::Seconds(60);
  model_len_ = 40000;
  Start(FakeBackendOptions{}, options);
  const int fd = SendCompletionWithoutReading(
      port_, R"({"model":"tiny","prompt":"abc","max_tokens":20000,"stream":true,"logprobs":5})");
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(backend_->WaitForCancelled(1, absl::Seconds(30)));
  EXPECT_TRUE(Eventually([&] { return gateway_->metrics().requests_running.Value() == 0; }));
  EXPECT_EQ(gateway_->metrics().slow_clients_closed_total.Value(), 1);
  auto served = HttpCall(port_, "POST", "/v1/completions",
                         R"({"model":"tiny","prompt":"abc","max_tokens":2})");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  ::close(fd);
}

// Past http.max_connections a new connection is answered 503 + Retry-After (not just closed).
TEST_F(HttpServerTest, PastMaxConnectionsANewConnectionGets503WithRetryAfter) {
  GatewayOptions options;
  options.http.max_connections = 2;
  options.http.retry_after_s = 7;
  Start(FakeBackendOptions{}, options);
  auto a = std::make_unique<HttpTestClient>(port_);
  auto b = std::make_unique<HttpTestClient>(port_);
  ASSERT_TRUE(a->connected() && b->connected());
  ASSERT_TRUE(Eventually([&] { return server_->open_connections() == 2; }));
  auto refused = HttpCall(port_, "GET", "/healthz");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 503);
  EXPECT_EQ(refused->headers["retry-after"], "7");
  EXPECT_THAT(refused->body, HasSubstr("\"code\":\"overloaded\""));
  EXPECT_EQ(gateway_->metrics().rejected_total.Add({{"reason", "connections"}}).Value(), 1);
  a.reset();
  ASSERT_TRUE(Eventually([&] { return server_->open_connections() == 1; }));
  auto served = HttpCall(port_, "GET", "/healthz");
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
}

// A flood at 10x capacity: every refusal is 503 (capacity) or 429 (the client's rate) with
// Retry-After, never more than max_in_flight generations run, the admitted ones complete with
// their tokens once the backend moves, and the gateway serves normally after the flood.
TEST_F(HttpServerTest, AFloodAtTenTimesCapacityIsRefusedWithRetryAfterAndRecovers) {
  constexpr int kCapacity = 4;
  constexpr int kFlood = 10 * kCapacity;
  const std::string body = R"({"model":"tiny","prompt":"abc","max_tokens":6})";
  FakeBackendOptions fb;
  fb.hold_after_tokens = 2;  // admitted generations wait until Release()
  GatewayOptions options;
  options.limits.max_in_flight = kCapacity;
  options.limits.retry_after_s = 2;
  Start(fb, options);
  std::vector<std::unique_ptr<HttpTestClient>> clients;
  for (int i = 0; i < kFlood; ++i) {
    clients.push_back(std::make_unique<HttpTestClient>(port_));
    ASSERT_TRUE(clients.back()->connected());
    ASSERT_TRUE(clients.back()->Send("POST", "/v1/completions", body));
    if (i + 1 == kCapacity) {
      ASSERT_TRUE(backend_->WaitForHeld(kCapacity, absl::Seconds(10)));
    }
  }
  int ok = 0, refused = 0;
  for (int i = kCapacity; i < kFlood; ++i) {
    auto r = clients[i]->Read();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 503) << i;
    EXPECT_EQ(r->headers["retry-after"], "2") << i;
    refused += r->status == 503;
  }
  EXPECT_EQ(backend_->num_started(), kCapacity);
  EXPECT_EQ(gateway_->metrics().requests_running.Value(), kCapacity);
  backend_->Release();
  std::vector<std::string> texts;
  for (int i = 0; i < kCapacity; ++i) {
    auto r = clients[i]->Read();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200) << i;
    texts.push_back(Json::parse(r->body)["choices"][0]["text"]);
    ok += r->status == 200;
  }
  EXPECT_EQ(ok, kCapacity);
  EXPECT_EQ(refused, kFlood - kCapacity);
  EXPECT_EQ(gateway_->metrics().rejected_total.Add({{"reason", "overloaded"}}).Value(),
            kFlood - kCapacity);
  // After the flood: served at once.
  ASSERT_TRUE(Eventually([&] { return gateway_->metrics().requests_running.Value() == 0; }));
  auto after = HttpCall(port_, "POST", "/v1/completions", body);
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200);
  // The admitted ones got what an unloaded request gets.
  const std::string want_text = Json::parse(after->body)["choices"][0]["text"];
  EXPECT_FALSE(want_text.empty());
  for (const std::string& t : texts) EXPECT_EQ(t, want_text);
}

// Per-client rate limits refuse with 429 + Retry-After (not 503), and the bucket refills.
TEST_F(HttpServerTest, RateLimitedRequestsGet429WithRetryAfter) {
  GatewayOptions options;
  options.limits.rate_limit_rps = 0.001;  // no refill within the test
  options.limits.rate_limit_burst = 2;
  Start(FakeBackendOptions{}, options);
  const std::string body = R"({"model":"tiny","prompt":"abc","max_tokens":2})";
  int ok = 0, limited = 0;
  for (int i = 0; i < 20; ++i) {
    auto r = HttpCall(port_, "POST", "/v1/completions", body);
    ASSERT_TRUE(r);
    if (r->status == 200) {
      ++ok;
    } else {
      EXPECT_EQ(r->status, 429);
      EXPECT_FALSE(r->headers["retry-after"].empty());
      EXPECT_GE(std::stoi(r->headers["retry-after"]), 1);
      ++limited;
    }
  }
  EXPECT_EQ(ok, 2);
  EXPECT_EQ(limited, 18);
}

}  // namespace
}  // namespace moe::gateway
