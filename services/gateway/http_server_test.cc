// The HTTP server with the real Gateway core and the fake backend, over loopback.
#include "services/gateway/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

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
#include "services/gateway/testing/test_tokenizer.h"

namespace moe::gateway {
namespace {

using Json = nlohmann::json;
using common::http::HttpCall;
using testing::FakeBackend;
using testing::FakeBackendOptions;
using ::testing::HasSubstr;
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
    Gateway* core = gateway_.get();
    auto server = HttpServer::Start(
        options.http,
        [core](HttpRequest r, std::shared_ptr<ResponseWriter> w) {
          return core->Handle(std::move(r), std::move(w));
        },
        core->metrics());
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
  // 4 MiB at most plus a tiny receive window).
  model_len_ = 40000;
  Start(fb, options);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  const int small = 1024;  // a tiny receive window, so that the server's writes stall
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body =
      R"({"model":"tiny","prompt":"abc","max_tokens":20000,"stream":true,"logprobs":5})";
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
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
  EXPECT_EQ(gateway_->in_flight(), 0);
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

}  // namespace
}  // namespace moe::gateway
