// GrpcBackend against in-process fake routers (gRPC on loopback port 0).
#include "services/gateway/grpc_backend.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "common/grpc/blocking_bidi_call.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "moe/router/v1/router.grpc.pb.h"

namespace moe::gateway {
namespace {

namespace pb = ::moe::router::v1;
using BatchCall =
    ::moe::common::rpc::BlockingBidiCall<pb::GenerateBatchRequest, pb::GenerateBatchResponse>;
using ::moe::generation::FinishReason;
using ::moe::generation::Usage;

// Streams prompt_token_ids back (one per message, max_tokens of them), then LENGTH + usage.
// With `hold` it sends one token and waits for cancellation.
class FakeRouter final : public pb::Router::WithCallbackMethod_GenerateBatch<pb::Router::Service> {
 public:
  explicit FakeRouter(std::string name) : name_(std::move(name)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
  }
  ~FakeRouter() override { server_->Shutdown(); }

  grpc::Status Generate(grpc::ServerContext* ctx, const pb::GenerateRequest* req,
                        grpc::ServerWriter<pb::GenerateResponse>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      last_ = *req;
    }
    if (reject_) return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    const int n = req->max_tokens();
    for (int i = 0; i < n; ++i) {
      pb::GenerateResponse r;
      r.add_token_ids(req->prompt_token_ids(i % req->prompt_token_ids_size()));
      if (req->logprobs()) r.add_logprobs()->set_logprob(-0.25f);
      if (i == n - 1) {
        r.set_finish_reason(pb::FINISH_REASON_LENGTH);
        r.mutable_usage()->set_prompt_tokens(req->prompt_token_ids_size());
        r.mutable_usage()->set_completion_tokens(n);
        r.mutable_usage()->set_cached_prompt_tokens(16);
      }
      writer->Write(r);
      if (hold_) {
        while (!ctx->IsCancelled()) absl::SleepFor(absl::Milliseconds(1));
        absl::MutexLock lock(&mu_);
        ++cancelled_;
        return grpc::Status::CANCELLED;
      }
    }
    return grpc::Status::OK;
  }

  // The same answers on a batch stream: each start is served on its own thread, items written
  // one per message.
  // (Served through the callback API, as the router does: common/grpc/blocking_bidi_call.h.)
  grpc::ServerBidiReactor<pb::GenerateBatchRequest, pb::GenerateBatchResponse>* GenerateBatch(
      grpc::CallbackServerContext* ctx) override {
    return BatchCall::Start(ctx, [this](BatchCall& call) { return ServeBatch(&call); });
  }
  grpc::Status ServeBatch(BatchCall* stream) {
    grpc::CallbackServerContext* const ctx = stream->context();
    absl::flat_hash_set<uint64_t> cancels;  // under mu_
    std::vector<std::thread> threads;
    auto write = [&](const pb::BatchItem& item) {
      pb::GenerateBatchResponse message;
      *message.add_items() = item;
      return stream->Write(message);  // serialised by BatchCall
    };
    auto serve = [&](const pb::BatchStart start) {
      const pb::GenerateRequest& req = start.request();
      pb::BatchItem item;
      item.set_id(start.id());
      if (reject_) {
        item.set_status_code(grpc::StatusCode::RESOURCE_EXHAUSTED);
        item.set_status_message("queue full");
        write(item);
        return;
      }
      const int n = req.max_tokens();
      for (int i = 0; i < n; ++i) {
        pb::GenerateResponse& r = *item.mutable_response();
        r.Clear();
        r.add_token_ids(req.prompt_token_ids(i % req.prompt_token_ids_size()));
        if (req.logprobs()) r.add_logprobs()->set_logprob(-0.25f);
        if (i == n - 1) {
          r.set_finish_reason(pb::FINISH_REASON_LENGTH);
          r.mutable_usage()->set_prompt_tokens(req.prompt_token_ids_size());
          r.mutable_usage()->set_completion_tokens(n);
          r.mutable_usage()->set_cached_prompt_tokens(16);
        }
        if (!write(item)) return;
        if (hold_) {
          {
            absl::MutexLock lock(&mu_);
            auto cancelled = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
              return cancels.contains(start.id()) || ctx->IsCancelled();
            };
            mu_.AwaitWithTimeout(absl::Condition(&cancelled), absl::Seconds(20));
            ++cancelled_;
          }
          r.Clear();
          r.set_finish_reason(pb::FINISH_REASON_ABORT);
          write(item);
          return;
        }
      }
    };
    pb::GenerateBatchRequest request;
    while (stream->Read(&request)) {
      absl::MutexLock lock(&mu_);
      for (uint64_t id : request.cancels()) cancels.insert(id);
      for (const pb::BatchStart& start : request.starts()) {
        ++calls_;
        last_ = start.request();
        threads.emplace_back(serve, start);
      }
    }
    for (std::thread& t : threads) t.join();
    return grpc::Status::OK;
  }

  grpc::Status GetStats(grpc::ServerContext*, const pb::GetStatsRequest*,
                        pb::GetStatsResponse* resp) override {
    resp->set_router_id(name_);
    resp->set_num_requests_waiting(waiting_);
    resp->set_kv_usage_ratio(0.25f);
    if (!fingerprint_.empty()) {
      resp->mutable_kv_namespace()->set_model_id("tiny");
      resp->mutable_kv_namespace()->set_checkpoint_fingerprint(fingerprint_);
      resp->mutable_kv_namespace()->set_block_size(16);
      resp->mutable_kv_namespace()->set_kv_dtype("f32");
      resp->mutable_kv_namespace()->set_numerics("activations=bf16;kv=exact");
    }
    return grpc::Status::OK;
  }

  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  bool WaitCancelled() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ > 0; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(10));
  }
  pb::GenerateRequest last() {
    absl::MutexLock lock(&mu_);
    return last_;
  }

  bool hold_ = false;
  bool reject_ = false;
  int waiting_ = 0;
  std::string fingerprint_;  // non-empty: GetStats publishes a KV namespace

 private:
  std::string name_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  int cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  pb::GenerateRequest last_ ABSL_GUARDED_BY(mu_);
};

// Collects a stream's events.
class Collector final : public GenerateObserver {
 public:
  void OnUpdate(GenerateUpdate u) override {
    absl::MutexLock lock(&mu_);
    for (int32_t id : u.token_ids) tokens_.push_back(id);
    if (u.finish != FinishReason::kNone) {
      finish_ = u.finish;
      usage_ = u.usage;
      done_ = true;
    }
  }
  void OnFailed(absl::Status s) override {
    absl::MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
  }
  bool Wait() {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(20));
  }
  absl::Mutex mu_;
  std::vector<int32_t> tokens_;
  FinishReason finish_ = FinishReason::kNone;
  std::optional<Usage> usage_;
  absl::Status status_;
  bool done_ = false;
};

// One gRPC library lifetime for the whole binary: tests create and destroy channels and servers
// back to back, and gRPC's asynchronous shutdown must not overlap the next test's start.
[[maybe_unused]] const bool kGrpcInitialized = [] {
  grpc_init();
  return true;
}();

RoutingOptions Routing(bool batch_stream, std::vector<std::string> routers) {
  RoutingOptions o;
  o.batch_stream = batch_stream;
  o.routers = std::move(routers);
  o.stats_interval = absl::Seconds(60);  // tests poll explicitly
  o.connect_timeout = absl::Seconds(2);
  return o;
}

// Every test runs over both transports: a Generate call per request, and one GenerateBatch
// stream per router (routing.batch_stream).
class GrpcBackendTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(Transports, GrpcBackendTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "BatchStream" : "CallPerRequest";
                         });

GenerateRequest Request(int max_tokens) {
  GenerateRequest r;
  r.request_id = "r1";
  r.prompt_token_ids = {5, 6, 7};
  r.sampling.max_tokens = max_tokens;
  r.sampling.temperature = 0.5f;
  r.sampling.seed = 3;
  r.sampling.logprobs = 0;  // the sampled token's logprob, no alternatives
  return r;
}

TEST_P(GrpcBackendTest, StreamsTokensFinishAndUsageFromARouter) {
  FakeRouter router("a");
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {router.target()}), "tiny"));
  backend->PollNowForTesting();
  EXPECT_TRUE(backend->Ready());
  auto collector = std::make_shared<Collector>();
  auto call = backend->Generate(Request(4), collector);
  ASSERT_TRUE(collector->Wait());
  EXPECT_THAT(collector->tokens_, ::testing::ElementsAre(5, 6, 7, 5));
  EXPECT_EQ(collector->finish_, FinishReason::kLength);
  ASSERT_TRUE(collector->usage_.has_value());
  EXPECT_EQ(collector->usage_->cached_prompt_tokens, 16);
  pb::GenerateRequest sent = router.last();
  EXPECT_FLOAT_EQ(sent.sampling().temperature(), 0.5f);
  EXPECT_TRUE(sent.sampling().has_seed());
  EXPECT_TRUE(sent.logprobs());
}

TEST_P(GrpcBackendTest, ConstraintsTravelAsTheProtoConstraint) {
  FakeRouter router("a");
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {router.target()}), "tiny"));
  backend->PollNowForTesting();
  auto send = [&](generation::Constraint c) {
    GenerateRequest r = Request(1);
    r.constraint = std::move(c);
    auto collector = std::make_shared<Collector>();
    auto call = backend->Generate(std::move(r), collector);
    EXPECT_TRUE(collector->Wait());
    return router.last();
  };
  using generation::ConstraintKind;
  EXPECT_FALSE(send({}).has_constraint());
  EXPECT_EQ(send({.kind = ConstraintKind::kJsonSchema, .spec = R"({"type":"integer"})"})
                .constraint()
                .json_schema(),
            R"({"type":"integer"})");
  EXPECT_TRUE(send({.kind = ConstraintKind::kJsonObject}).constraint().json_object());
  EXPECT_EQ(send({.kind = ConstraintKind::kRegex, .spec = "[a-z]+"}).constraint().regex(),
            "[a-z]+");
  pb::GenerateRequest choice = send({.kind = ConstraintKind::kChoice, .choices = {"yes", "no"}});
  ASSERT_EQ(choice.constraint().choice().choices_size(), 2);
  EXPECT_EQ(choice.constraint().choice().choices(1), "no");
}

TEST_P(GrpcBackendTest, UnreachableRouterIsSkippedBeforeTheFirstToken) {
  FakeRouter live("live");
  // A port nobody listens on.
  int dead_port;
  {
    FakeRouter tmp("tmp");
    dead_port = std::stoi(tmp.target().substr(10));
  }
  const std::string dead = "127.0.0.1:" + std::to_string(dead_port);
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {dead, live.target()}), "tiny"));
  // Without a poll both look healthy-unknown (down); every request must still succeed.
  for (int i = 0; i < 4; ++i) {
    auto collector = std::make_shared<Collector>();
    GenerateRequest r = Request(2);
    r.prompt_token_ids = {i, i + 1, i + 2};
    auto call = backend->Generate(r, collector);
    ASSERT_TRUE(collector->Wait());
    EXPECT_TRUE(collector->status_.ok()) << collector->status_;
    EXPECT_EQ(collector->finish_, FinishReason::kLength);
  }
  EXPECT_EQ(live.calls(), 4);
  backend->PollNowForTesting();
  std::vector<RouterLoad> loads = backend->Loads();
  EXPECT_FALSE(loads[0].healthy);
  EXPECT_TRUE(loads[1].healthy);
}

TEST_P(GrpcBackendTest, FullRouterQueueRetriesOnAnotherRouter) {
  FakeRouter full("full"), free("free");
  full.reject_ = true;
  ASSERT_OK_AND_ASSIGN(
      auto backend,
      GrpcBackend::Create(Routing(GetParam(), {full.target(), free.target()}), "tiny"));
  backend->PollNowForTesting();
  for (int i = 0; i < 4; ++i) {
    auto collector = std::make_shared<Collector>();
    GenerateRequest r = Request(1);
    r.prompt_token_ids = {i * 7, 1, 2};
    auto call = backend->Generate(r, collector);
    ASSERT_TRUE(collector->Wait());
    EXPECT_TRUE(collector->status_.ok()) << collector->status_;
  }
  EXPECT_EQ(free.calls(), 4);
}

TEST_P(GrpcBackendTest, AllRoutersFailingIsUnavailable) {
  FakeRouter full("full");
  full.reject_ = true;
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {full.target()}), "tiny"));
  auto collector = std::make_shared<Collector>();
  auto call = backend->Generate(Request(1), collector);
  ASSERT_TRUE(collector->Wait());
  EXPECT_EQ(collector->status_.code(), absl::StatusCode::kResourceExhausted);
}

TEST_P(GrpcBackendTest, CancelEndsTheRouterStream) {
  FakeRouter router("a");
  router.hold_ = true;
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {router.target()}), "tiny"));
  auto collector = std::make_shared<Collector>();
  auto call = backend->Generate(Request(10), collector);
  {
    absl::MutexLock lock(&collector->mu_);
    auto first = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(collector->mu_) {
      return !collector->tokens_.empty();
    };
    ASSERT_TRUE(collector->mu_.AwaitWithTimeout(absl::Condition(&first), absl::Seconds(10)));
  }
  call->Cancel();
  EXPECT_TRUE(router.WaitCancelled());
  ASSERT_TRUE(collector->Wait());
  EXPECT_EQ(collector->status_.code(), absl::StatusCode::kCancelled);
}

TEST_P(GrpcBackendTest, StatsFeedTheLoadView) {
  FakeRouter a("a"), b("b");
  b.waiting_ = 24;
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {a.target(), b.target()}), "tiny"));
  backend->PollNowForTesting();
  std::vector<RouterLoad> loads = backend->Loads();
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[1].num_waiting, 24);
  EXPECT_NEAR(loads[0].kv_usage_ratio, 0.25, 1e-6);
  // Every request avoids the busy router (load 3.25 vs 0.25, slack 0.5).
  for (int i = 0; i < 6; ++i) {
    auto collector = std::make_shared<Collector>();
    GenerateRequest r = Request(1);
    r.prompt_token_ids = {i, 100 + i, 3};
    auto call = backend->Generate(r, collector);
    ASSERT_TRUE(collector->Wait());
  }
  EXPECT_EQ(a.calls(), 6);
  EXPECT_EQ(b.calls(), 0);
}

TEST_P(GrpcBackendTest, AffinityHashesUnderTheNamespaceRoutersPublish) {
  FakeRouter a("a");
  ASSERT_OK_AND_ASSIGN(auto backend,
                       GrpcBackend::Create(Routing(GetParam(), {a.target()}), "tiny"));
  // Before any router answered: the options' namespace.
  EXPECT_EQ(backend->AffinityNamespace().checkpoint_fingerprint, "");
  a.fingerprint_ = "0123456789abcdef0123456789abcdef";
  backend->PollNowForTesting();
  const kv::BlockHashRootKey ns = backend->AffinityNamespace();
  EXPECT_EQ(ns.model_id, "tiny");
  EXPECT_EQ(ns.checkpoint_fingerprint, a.fingerprint_);
  EXPECT_EQ(ns.block_size, 16);
  EXPECT_EQ(ns.numerics, kv::NumericsSetting("bf16", "exact"));
  // So an affinity key is exactly a router's (and the kv-store's) block hash of the prompt.
  std::vector<int32_t> prompt(80);
  for (int i = 0; i < 80; ++i) prompt[i] = 7 * i + 1;
  EXPECT_EQ(AffinityKey(kv::RootHash(ns), prompt, 16, 4),
            kv::HashFullBlocks(kv::RootHash(ns), prompt, 16)[3]);
}

}  // namespace
}  // namespace moe::gateway
