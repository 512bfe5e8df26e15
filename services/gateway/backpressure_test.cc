// Back-pressure from a slow HTTP client to the router: the real HTTP server, Gateway core and
// GrpcBackend in front of an in-process fake router (gRPC on loopback port 0) whose stream is
// bounded like services/router's (a token is generated only while the stream has room, else the
// sequence is held). Asserts the behaviour, not its timing: a client that stops reading stops
// the router stream being read, so the router holds the sequence instead of generating on, the
// gateway's unsent bytes stay at about http.stream_read_pause_bytes, nobody is cut, and the
// client that reads on gets every token.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/grpc/blocking_bidi_call.h"
#include "common/metrics/registry.h"
#include "common/testing/status_matchers.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "services/gateway/core/gateway.h"
#include "services/gateway/grpc_backend.h"
#include "services/gateway/http_server.h"
#include "services/gateway/testing/slow_client.h"
#include "services/gateway/testing/test_tokenizer.h"

namespace moe::gateway {
namespace {

namespace pb = ::moe::router::v1;
using BatchCall =
    ::moe::common::rpc::BlockingBidiCall<pb::GenerateBatchRequest, pb::GenerateBatchResponse>;
using Json = nlohmann::json;
using testing::SendCompletionWithoutReading;

// One Generate stream at a time, shaped like the router's (services/router/core/request_stream.h
// and RouterServer::Generate): a producer thread (the scheduler) appends a token only while fewer
// than `capacity` are unread, else the sequence is held; the handler takes what is queued and
// writes one message per token. max_tokens tokens, cycling over "a".."z", then LENGTH + usage.
class BoundedRouter final
    : public pb::Router::WithCallbackMethod_GenerateBatch<pb::Router::Service> {
 public:
  explicit BoundedRouter(int capacity) : capacity_(capacity) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~BoundedRouter() override { server_->Shutdown(); }

  grpc::Status Generate(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                        grpc::ServerWriter<pb::GenerateResponse>* writer) override {
    const bool ok = Serve(
        *req, [&] { return ctx->IsCancelled(); },
        [&](const pb::GenerateResponse& r) { return writer->Write(r); });
    return ok ? grpc::Status::OK : grpc::Status::CANCELLED;
  }

  // The same on a batch stream, shaped like RouterServer::GenerateBatch's flow control: an item
  // goes out only while the request has credit (BatchStart.window, then the gateway's credits).
  // (Served through the callback API, as the router does: common/grpc/blocking_bidi_call.h.)
  grpc::ServerBidiReactor<pb::GenerateBatchRequest, pb::GenerateBatchResponse>* GenerateBatch(
      grpc::CallbackServerContext* ctx) override {
    return BatchCall::Start(ctx, [this](BatchCall& call) { return ServeBatch(&call); });
  }
  grpc::Status ServeBatch(BatchCall* stream) {
    grpc::CallbackServerContext* const ctx = stream->context();
    std::vector<std::thread> served;
    bool reader_done = false;  // under mu_
    pb::GenerateBatchRequest request;
    while (stream->Read(&request)) {
      absl::MutexLock lock(&mu_);
      for (const pb::BatchCredit& c : request.credits()) credit_ += c.items();
      if (request.cancels_size() > 0) batch_cancelled_ = true;
      for (const pb::BatchStart& start : request.starts()) {
        credit_ = start.window();
        batch_cancelled_ = false;
        served.emplace_back([this, start, ctx, stream, &reader_done] {
          auto gone = [&] {
            absl::MutexLock lock(&mu_);
            return reader_done || batch_cancelled_ || ctx->IsCancelled();
          };
          const bool finished = Serve(start.request(), gone, [&](const pb::GenerateResponse& r) {
            {
              absl::MutexLock lock(&mu_);
              auto has_credit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
                return credit_ > 0 || reader_done || batch_cancelled_;
              };
              mu_.Await(absl::Condition(&has_credit));
              if (reader_done || batch_cancelled_) return false;
              --credit_;
            }
            pb::GenerateBatchResponse message;
            pb::BatchItem* item = message.add_items();
            item->set_id(start.id());
            *item->mutable_response() = r;
            return stream->Write(message);
          });
          // A cancelled request ends with its ABORT item, as the router's do.
          if (!finished) {
            pb::GenerateBatchResponse message;
            pb::BatchItem* item = message.add_items();
            item->set_id(start.id());
            item->mutable_response()->set_finish_reason(pb::FINISH_REASON_ABORT);
            stream->Write(message);
          }
        });
      }
    }
    {
      absl::MutexLock lock(&mu_);
      reader_done = true;
    }
    for (std::thread& t : served) t.join();
    return grpc::Status::OK;
  }

  // One request: the producer (the scheduler) and the writer loop; false when cut short.
  bool Serve(const pb::GenerateRequest& request, const std::function<bool()>& cancelled,
             const std::function<bool(const pb::GenerateResponse&)>& write) {
    const pb::GenerateRequest* req = &request;
    const int n = req->max_tokens();
    {
      absl::MutexLock lock(&mu_);
      queue_.clear();
      sent_.clear();
      stop_ = false;
      generated_ = 0;
    }
    std::thread producer([this, n] {
      for (int i = 0; i < n; ++i) {
        absl::MutexLock lock(&mu_);
        if (static_cast<int>(queue_.size()) >= capacity_) {
          held_ = true;
          ++holds_;
        }
        auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || static_cast<int>(queue_.size()) < capacity_;
        };
        mu_.Await(absl::Condition(&room));
        held_ = false;
        if (stop_) return;
        const int32_t id = 3 + 'a' + i % 26;  // the test tokenizer's byte tokens
        queue_.push_back(id);
        sent_.push_back(id);
        ++generated_;
      }
    });
    int written = 0;
    bool ok = true;
    while (ok && written < n && !cancelled()) {
      std::deque<int32_t> batch;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty(); };
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(50));
        batch.swap(queue_);
      }
      for (int32_t id : batch) {
        pb::GenerateResponse r;
        r.add_token_ids(id);
        if (++written == n) {
          r.set_finish_reason(pb::FINISH_REASON_LENGTH);
          r.mutable_usage()->set_prompt_tokens(req->prompt_token_ids_size());
          r.mutable_usage()->set_completion_tokens(n);
        }
        if (!(ok = write(r))) break;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      if (!ok || written < n) ++cancelled_;
    }
    producer.join();
    return written == n;
  }

  grpc::Status GetStats(grpc::ServerContext*, const pb::GetStatsRequest*,
                        pb::GetStatsResponse* resp) override {
    resp->set_router_id("fake");
    return grpc::Status::OK;
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  // The producer waits for room: the router would not decode this sequence now.
  bool held() {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  int64_t generated() {
    absl::MutexLock lock(&mu_);
    return generated_;
  }
  int64_t holds() {
    absl::MutexLock lock(&mu_);
    return holds_;
  }
  int cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }
  std::vector<int32_t> sent() {
    absl::MutexLock lock(&mu_);
    return sent_;
  }

 private:
  const int capacity_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  std::deque<int32_t> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> sent_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  int64_t generated_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t holds_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t credit_ ABSL_GUARDED_BY(mu_) = 0;  // GenerateBatch: items the request may still send
  bool batch_cancelled_ ABSL_GUARDED_BY(mu_) = false;  // GenerateBatch: the gateway cancelled
};

// One gRPC library lifetime for the whole binary (see grpc_backend_test.cc).
[[maybe_unused]] const bool kGrpcInitialized = [] {
  grpc_init();
  return true;
}();

bool Eventually(const std::function<bool()>& pred) {
  for (int i = 0; i < 6000; ++i) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return pred();
}

// The concatenated `text` of every SSE completion chunk in a raw chunked HTTP response (each
// Write of the server is one chunk holding whole events).
std::string StreamedText(const std::string& raw) {
  std::string text;
  size_t pos = raw.find("\r\n\r\n");
  if (pos == std::string::npos) return text;
  pos += 4;
  while (pos < raw.size()) {
    const size_t eol = raw.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t size = std::stoul(raw.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) break;
    const std::string chunk = raw.substr(eol + 2, size);
    pos = eol + 2 + size + 2;
    for (size_t at = 0; (at = chunk.find("data: ", at)) != std::string::npos;) {
      const size_t end = chunk.find("\n\n", at);
      const std::string payload = chunk.substr(at + 6, end - at - 6);
      at = end;
      if (payload == "[DONE]") continue;
      const Json event = Json::parse(payload);
      if (event.contains("choices") && !event["choices"].empty()) {
        text += event["choices"][0].value("text", "");
      }
    }
  }
  return text;
}

// Both transports: a Generate call per request, and the per-router GenerateBatch stream.
class BackpressureTest : public ::testing::TestWithParam<bool> {
 protected:
  void Start(GatewayOptions options, int32_t model_len) {
    RoutingOptions routing;
    routing.batch_stream = GetParam();
    routing.routers = {router_.target()};
    routing.stats_interval = absl::Seconds(60);  // polled explicitly
    routing.connect_timeout = absl::Seconds(2);
    ASSERT_OK_AND_ASSIGN(backend_, GrpcBackend::Create(routing, "tiny"));
    backend_->PollNowForTesting();
    ASSERT_TRUE(backend_->Ready());
    options.model_dir = "/unused";
    options.http.host = "127.0.0.1";
    options.http.port = 0;
    ASSERT_OK_AND_ASSIGN(
        gateway_, Gateway::Create(
                      options, ModelInfo{"tiny", model_len, 0},
                      GatewayDeps{*tokenizer_, *backend_, common::SystemClock::Get(), registry_}));
    ASSERT_OK_AND_ASSIGN(server_, ServeGateway(options.http, *gateway_));
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (gateway_) Eventually([&] { return gateway_->in_flight() == 0; });
    server_.reset();
    gateway_.reset();
    backend_.reset();
  }

  BoundedRouter router_{/*capacity=*/16};
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_ = testing::MakeTestTokenizer();
  common::metrics::Registry registry_;
  std::unique_ptr<GrpcBackend> backend_;
  std::unique_ptr<Gateway> gateway_;
  std::unique_ptr<HttpServer> server_;
};

INSTANTIATE_TEST_SUITE_P(Transports, BackpressureTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "BatchStream" : "CallPerRequest";
                         });

// ~13.6 MB of SSE (~170 bytes a token): 4x what the kernel buffers between the two sockets, the
// gateway's bound and gRPC's flow-control windows held together when the router stopped (with the
// client's 64 KiB receive buffer it was held after 19.3-20.5k tokens in 5 runs). 8.7 s for both
// tests, 35 s under ASan.
constexpr int kTokens = 80000;

// A client that reads the first bytes and then stops: once the kernel buffers are full the
// gateway's unsent bytes pass http.stream_read_pause_bytes, the gateway stops reading the router
// stream, HTTP/2 flow control fills, and the router's bounded stream holds the sequence before it
// has generated the whole answer. Nothing is cut; when the client reads on, every token arrives.
TEST_P(BackpressureTest, AClientThatStopsReadingHoldsTheRouterAndLosesNothing) {
  GatewayOptions options;
  options.http.max_pending_write_bytes = 256 << 10;
  options.http.stream_read_pause_bytes = 64 << 10;
  options.http.write_timeout = absl::Seconds(120);  // no timeout cut while the client pauses
  Start(options, kTokens + 64);
  const int fd = SendCompletionWithoutReading(
      server_->port(), absl::StrCat(R"({"model":"tiny","prompt":"abc",)",
                                    R"("stream":true,"max_tokens":)", kTokens, "}"));
  ASSERT_GE(fd, 0);
  std::string got;
  char buf[1 << 16];
  while (got.find("\"text\"") == std::string::npos) {  // the headers and a first token
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, n);
  }
  // The client stops reading: the gateway pauses the router stream and the router holds it.
  const GatewayMetrics& m = gateway_->metrics();
  ASSERT_TRUE(Eventually([&] { return router_.held() && m.stream_read_pauses_total.Value() > 0; }))
      << "generated " << router_.generated() << " of " << kTokens << ", pauses "
      << m.stream_read_pauses_total.Value();
  const int64_t generated_while_paused = router_.generated();
  const double pending = m.pending_write_bytes.Value();
  std::fprintf(stderr, "paused: router generated %lld of %d tokens; gateway holds %.0f bytes\n",
               static_cast<long long>(generated_while_paused), kTokens, pending);
  EXPECT_LT(generated_while_paused, kTokens);
  // At most the pause mark plus one update's bytes, far under the cut; on a batch stream plus
  // what two credit windows let through (the credit in flight when the pause began, and the
  // items delivered while the last readiness check was out, credited together): 2 x 16 items
  // of ~170 bytes here.
  const int64_t window_slack = GetParam() ? 2 * RoutingOptions{}.batch_window * 256 : 0;
  EXPECT_LE(pending,
            static_cast<double>(options.http.stream_read_pause_bytes + 4096 + window_slack));
  EXPECT_EQ(m.slow_clients_closed_total.Value(), 0);
  EXPECT_EQ(router_.cancelled(), 0);
  // The client reads on: the stream completes with every token, in order.
  while (!absl::EndsWith(got, "0\r\n\r\n")) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, n);
  }
  ::close(fd);
  ASSERT_TRUE(absl::EndsWith(got, "data: [DONE]\n\n\r\n0\r\n\r\n")) << got.size() << " bytes";
  const std::vector<int32_t> sent = router_.sent();
  ASSERT_EQ(sent.size(), static_cast<size_t>(kTokens));
  EXPECT_EQ(StreamedText(got), tokenizer_->Decode(sent, /*skip_special_tokens=*/true));
  EXPECT_EQ(m.slow_clients_closed_total.Value(), 0);
  EXPECT_EQ(router_.cancelled(), 0);
  EXPECT_GE(router_.holds(), 1);
  EXPECT_TRUE(Eventually([&] { return m.pending_write_bytes.Value() == 0; }));
}

// The hard cut stays behind the pause: a client that never reads again is cut by
// http.write_timeout (no progress), counted, and its router stream cancelled.
TEST_P(BackpressureTest, AClientPausedForeverIsCutByTheWriteTimeout) {
  GatewayOptions options;
  options.http.max_pending_write_bytes = 256 << 10;
  options.http.write_timeout = absl::Milliseconds(300);
  Start(options, kTokens + 64);
  const int fd = SendCompletionWithoutReading(
      server_->port(), absl::StrCat(R"({"model":"tiny","prompt":"abc",)",
                                    R"("stream":true,"max_tokens":)", kTokens, "}"));
  ASSERT_GE(fd, 0);
  const GatewayMetrics& m = gateway_->metrics();
  ASSERT_TRUE(Eventually([&] { return m.slow_clients_closed_total.Value() == 1; }));
  EXPECT_TRUE(Eventually([&] { return router_.cancelled() == 1; }));
  EXPECT_LT(router_.generated(), kTokens);
  EXPECT_TRUE(Eventually([&] { return gateway_->in_flight() == 0; }));
  EXPECT_TRUE(Eventually([&] { return m.pending_write_bytes.Value() == 0; }));
  ::close(fd);
}

}  // namespace
}  // namespace moe::gateway
