// The router in-process on port 0 over the tiny preset: streamed Generate tokens equal the
// embedded engine's greedy output; bad input and overload map to the documented gRPC codes.
#include "services/router/router_server.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/engine/generator.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/method_policy.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "services/router/core/router_core.h"

namespace moe::router {
namespace {

namespace pb = ::moe::router::v1;
using ::moe::common::testing::IsOkAndHolds;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class RouterServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("router_server_test"));
    model::MakeModelOptions make;
    make.preset = model::Preset::kTiny;
    ASSERT_OK(model::MakeModel(make, *dir_));
  }
  static void TearDownTestSuite() { delete dir_; }

  // Builds a router over the tiny model; `start` = run the scheduler loop.
  void StartRouter(SchedulerOptions scheduler_options, bool start = true,
                   std::optional<common::rpc::ServerOptions> grpc = std::nullopt) {
    RouterCoreOptions options;
    options.model_dir = *dir_;
    options.model_name = "tiny";
    options.num_threads = 1;
    options.kv_num_blocks = 256;
    options.scheduler = scheduler_options;
    ASSERT_OK_AND_ASSIGN(core_, RouterCore::Create(options, registry_, common::SystemClock::Get()));
    const auto& config = core_->config();
    server_ = std::make_unique<RouterServer>(
        core_->scheduler(),
        RouterServerInfo{.model_name = "tiny",
                         .router_id = "r0",
                         .vocab_size = config.vocab_size,
                         .max_context = config.max_position_embeddings,
                         .num_layers = config.num_hidden_layers,
                         .num_experts = config.num_experts},
        common::SystemClock::Get(), *auth_);
    common::rpc::ServerOptions grpc_options = grpc.value_or(common::rpc::ServerOptions{});
    grpc_options.host = "127.0.0.1";
    grpc_options.port = 0;
    grpc_options.drain_timeout = absl::Seconds(2);
    runner_ = std::make_unique<common::rpc::ServerRunner>(grpc_options);
    runner_->AddService(server_.get(), pb::Router::service_full_name());
    ASSERT_OK(runner_->Start());
    runner_->SetServing(true);
    if (start) {
      ASSERT_OK(core_->scheduler().Start());
    }
    ASSERT_OK_AND_ASSIGN(auto channel,
                         common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner_->port())));
    stub_ = pb::Router::NewStub(channel);
  }

  void TearDown() override {
    if (runner_) runner_->Shutdown();
    core_.reset();
  }

  struct Streamed {
    grpc::Status status;
    std::vector<int32_t> token_ids;
    std::vector<pb::GenerateResponse> messages;
  };
  Streamed Generate(const pb::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    auto reader = stub_->Generate(&context, request);
    Streamed out;
    pb::GenerateResponse response;
    while (reader->Read(&response)) {
      out.token_ids.insert(out.token_ids.end(), response.token_ids().begin(),
                           response.token_ids().end());
      out.messages.push_back(response);
    }
    out.status = reader->Finish();
    return out;
  }

  // The embedded engine's greedy tokens (a separate engine over the same checkpoint).
  std::vector<int32_t> EngineGreedy(const std::vector<int32_t>& prompt, int max_tokens) {
    auto ckpt = model::Checkpoint::Open(*dir_);
    EXPECT_OK(ckpt.status());
    engine::EngineOptions options;
    options.kv_num_blocks = 64;
    auto engine = engine::Engine::Create((*ckpt)->config(), (*ckpt)->weights(), options);
    EXPECT_OK(engine.status());
    engine::Generator generator(engine->get(), engine::GeneratorOptions{});
    engine::GenerationRequest request;
    request.prompt_ids = prompt;
    request.sampling.temperature = 0;
    request.sampling.max_tokens = max_tokens;
    request.sampling.ignore_eos = true;
    auto results = generator.Generate({request});
    EXPECT_OK(results.status());
    return results.ok() ? (*results)[0].output_ids : std::vector<int32_t>{};
  }

  static pb::GenerateRequest Request(const std::vector<int32_t>& prompt, int max_tokens) {
    pb::GenerateRequest request;
    for (int32_t t : prompt) request.add_prompt_token_ids(t);
    request.set_max_tokens(max_tokens);
    request.set_ignore_eos(true);
    return request;
  }

  static std::string* dir_;
  common::metrics::Registry registry_;
  std::unique_ptr<RouterCore> core_;
  std::unique_ptr<common::rpc::Authorizer> auth_ =
      common::rpc::Authorizer::AllowAll("router", registry_);
  std::unique_ptr<RouterServer> server_;
  std::unique_ptr<common::rpc::ServerRunner> runner_;
  std::unique_ptr<pb::Router::Stub> stub_;
};
std::string* RouterServerTest::dir_ = nullptr;

// mTLS with auth: plaintext, certificate-less and foreign-CA callers never reach a handler; the
// gateway may generate but not switch placements, the admin the reverse (SECURITY.md).
TEST_F(RouterServerTest, EveryMethodServesOnlyItsRoles) {
  common::rpc::testing::ClusterPki pki(common::testing::MakeTempDir("router_auth"));
  const common::rpc::ServerOptions grpc = pki.Server();
  ASSERT_OK_AND_ASSIGN(auth_, common::rpc::Authorizer::Create(grpc.auth, "router", registry_,
                                                              common::SystemClock::Get()));
  StartRouter(SchedulerOptions{}, /*start=*/true, grpc);
  const auto* service = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      pb::Router::service_full_name());
  ASSERT_NE(service, nullptr);
  pki.ExpectEveryMethodGuarded(absl::StrCat("127.0.0.1:", runner_->port()), *service,
                               kRouterPolicies);
  EXPECT_THAT(registry_.Value("moe_rpc_refused_total", {{"service", "router"},
                                                        {"method", "SetPlacement"},
                                                        {"code", "PERMISSION_DENIED"}}),
              IsOkAndHolds(2.0));  // the gateway's and the router's
}

std::vector<int32_t> Prompt(int n, int seed) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (seed * 37 + i * 11) % 500 + 3;
  return p;
}

TEST_F(RouterServerTest, StreamsTheEnginesGreedyTokens) {
  // Capacity 1: the scheduler waits for each token to be read, so every token is its own message.
  SchedulerOptions options;
  options.stream_capacity = 1;
  StartRouter(options);
  const auto prompt = Prompt(21, 1);
  const auto expected = EngineGreedy(prompt, 12);
  ASSERT_EQ(expected.size(), 12u);
  Streamed first = Generate(Request(prompt, 12));
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  EXPECT_THAT(first.token_ids, ElementsAreArray(expected));
  ASSERT_GE(first.messages.size(), 12u);  // streamed, not one blob
  const pb::GenerateResponse& last = first.messages.back();
  EXPECT_EQ(last.finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(last.usage().prompt_tokens(), 21);
  EXPECT_EQ(last.usage().completion_tokens(), 12);
  EXPECT_EQ(last.usage().cached_prompt_tokens(), 0);
  for (size_t i = 0; i + 1 < first.messages.size(); ++i) {
    EXPECT_EQ(first.messages[i].finish_reason(), pb::FINISH_REASON_UNSPECIFIED);
  }
  // The same prompt again hits the prefix cache and still gives the same tokens.
  Streamed second = Generate(Request(prompt, 12));
  ASSERT_TRUE(second.status.ok());
  EXPECT_THAT(second.token_ids, ElementsAreArray(expected));
  EXPECT_EQ(second.messages.back().usage().cached_prompt_tokens(), 16);

  // The scheduler finishes a stream, then bumps moe_requests_total, and publishes GetStats's
  // snapshot when the step ends, so the client can read the final token before either (seen once
  // in 60 ASan runs on a loaded machine): wait for both to settle.
  auto requests_total = [&] {
    return registry_.Value("moe_requests_total", {{"model", "tiny"}, {"finish_reason", "length"}})
        .value_or(-1);
  };
  pb::GetStatsResponse stats;
  for (int i = 0; i < 1000; ++i) {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->GetStats(&context, pb::GetStatsRequest(), &stats).ok());
    if (stats.num_requests_running() == 0 && requests_total() == 2) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(stats.model(), "tiny");
  EXPECT_EQ(stats.router_id(), "r0");
  EXPECT_EQ(stats.kv_blocks_total(), 256);
  EXPECT_EQ(stats.num_requests_running(), 0);
  EXPECT_EQ(stats.expert_load().num_experts(), 8);
  EXPECT_EQ(requests_total(), 2);
  EXPECT_EQ(registry_.Value("moe_cached_prompt_tokens_total", {{"model", "tiny"}}).value_or(-1),
            16);
}

TEST_F(RouterServerTest, PrefillOnlyFillsThePrefixCacheAndGeneratesNothing) {
  StartRouter(SchedulerOptions{});
  const auto prompt = Prompt(37, 3);
  pb::GenerateRequest prefill =
      Request(std::vector<int32_t>(prompt.begin(), prompt.begin() + 33), 0);
  prefill.set_prefill_only(true);
  Streamed warm = Generate(prefill);
  ASSERT_TRUE(warm.status.ok()) << warm.status.error_message();
  EXPECT_TRUE(warm.token_ids.empty());
  ASSERT_EQ(warm.messages.size(), 1u);
  EXPECT_EQ(warm.messages[0].finish_reason(), pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(warm.messages[0].usage().prompt_tokens(), 33);
  EXPECT_EQ(warm.messages[0].usage().completion_tokens(), 0);
  // The whole prompt then finds its first two blocks cached, and its tokens are unchanged.
  Streamed full = Generate(Request(prompt, 6));
  ASSERT_TRUE(full.status.ok());
  EXPECT_EQ(full.messages.back().usage().cached_prompt_tokens(), 32);
  EXPECT_THAT(full.token_ids, ElementsAreArray(EngineGreedy(prompt, 6)));

  pb::GenerateRequest bad = Request(prompt, 4);
  bad.set_prefill_only(true);
  EXPECT_EQ(Generate(bad).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(RouterServerTest, ConcurrentStreamsEachMatchTheEngine) {
  StartRouter(SchedulerOptions{});
  std::vector<std::thread> clients;
  std::vector<Streamed> got(4);
  for (int i = 0; i < 4; ++i) {
    clients.emplace_back([&, i] { got[i] = Generate(Request(Prompt(9 + 5 * i, i), 8)); });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(got[i].status.ok());
    EXPECT_THAT(got[i].token_ids, ElementsAreArray(EngineGreedy(Prompt(9 + 5 * i, i), 8))) << i;
  }
}

TEST_F(RouterServerTest, BadInputIsInvalidArgument) {
  StartRouter(SchedulerOptions{});
  auto code = [&](const pb::GenerateRequest& r) { return Generate(r).status.error_code(); };
  EXPECT_EQ(code(Request({}, 4)), grpc::StatusCode::INVALID_ARGUMENT);        // empty prompt
  EXPECT_EQ(code(Request({1, 512}, 4)), grpc::StatusCode::INVALID_ARGUMENT);  // id >= vocab
  EXPECT_EQ(code(Request({1, 2}, -1)), grpc::StatusCode::INVALID_ARGUMENT);   // max_tokens < 0
  EXPECT_EQ(code(Request(Prompt(4096, 1), 1)), grpc::StatusCode::INVALID_ARGUMENT);  // > context
  EXPECT_EQ(code(Request(Prompt(4000, 1), 200)), grpc::StatusCode::INVALID_ARGUMENT);
  pb::GenerateRequest wrong_model = Request({1, 2}, 1);
  wrong_model.set_model("other");
  EXPECT_EQ(code(wrong_model), grpc::StatusCode::FAILED_PRECONDITION);
  pb::GenerateRequest hot = Request({1, 2}, 1);
  hot.mutable_sampling()->set_top_p(1.5f);
  Streamed bad = Generate(hot);
  EXPECT_EQ(bad.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.status.error_message(), HasSubstr("top_p"));
  grpc::ClientContext context;
  pb::SetPlacementResponse placed;
  EXPECT_EQ(stub_->SetPlacement(&context, pb::SetPlacementRequest(), &placed).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(RouterServerTest, FullQueueIsResourceExhausted) {
  SchedulerOptions options;
  options.max_waiting = 1;
  StartRouter(options, /*start=*/false);  // nothing drains the queue
  GenerateRequest queued;
  queued.prompt_token_ids = {1, 2, 3};
  queued.sampling.temperature = 0;
  ASSERT_OK(core_->scheduler().Submit(queued).status());
  Streamed rejected = Generate(Request({1, 2, 3}, 2));
  EXPECT_EQ(rejected.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(RouterServerTest, TimeoutEndsWithAbortAndStopTokensStop) {
  StartRouter(SchedulerOptions{});
  const auto prompt = Prompt(12, 3);
  const auto expected = EngineGreedy(prompt, 6);
  pb::GenerateRequest stop = Request(prompt, 6);
  stop.add_stop_token_ids(expected[1]);
  Streamed stopped = Generate(stop);
  ASSERT_TRUE(stopped.status.ok());
  EXPECT_EQ(stopped.messages.back().finish_reason(), pb::FINISH_REASON_STOP);
  EXPECT_EQ(stopped.token_ids.back(), expected[1]);
}

// GenerateBatch: many requests on one stream, one message per step. Collects items per id.
class BatchClient {
 public:
  explicit BatchClient(pb::Router::Stub& stub) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    stream_ = stub.GenerateBatch(&context_);
  }
  bool Send(const pb::GenerateBatchRequest& request) { return stream_->Write(request); }
  // Reads one message into the per-id records; false once the stream ended.
  bool ReadOne() {
    pb::GenerateBatchResponse message;
    if (!stream_->Read(&message)) return false;
    ++messages;
    for (const pb::BatchItem& item : message.items()) {
      Record& r = records[item.id()];
      ++r.items;
      if (item.status_code() != 0) {
        r.status_code = item.status_code();
        r.status_message = item.status_message();
        r.done = true;
        continue;
      }
      r.token_ids.insert(r.token_ids.end(), item.response().token_ids().begin(),
                         item.response().token_ids().end());
      if (item.response().token_ids().empty()) ++r.items_without_tokens;
      if (item.response().finish_reason() != pb::FINISH_REASON_UNSPECIFIED) {
        r.finish = item.response().finish_reason();
        r.usage = item.response().usage();
        r.done = true;
      }
    }
    return true;
  }
  // Reads until every id in `ids` is done.
  bool ReadUntilDone(const std::vector<uint64_t>& ids) {
    auto all_done = [&] {
      for (uint64_t id : ids)
        if (!records[id].done) return false;
      return true;
    };
    while (!all_done()) {
      if (!ReadOne()) return false;
    }
    return true;
  }
  grpc::Status Close() {
    stream_->WritesDone();
    while (ReadOne()) {
    }
    return stream_->Finish();
  }

  struct Record {
    std::vector<int32_t> token_ids;
    int items = 0;
    // Items carrying no token: only a request's last may, when the scheduler finished its stream
    // after the writer had taken the last token (finish_reason and usage then come alone).
    int items_without_tokens = 0;
    pb::FinishReason finish = pb::FINISH_REASON_UNSPECIFIED;
    pb::Usage usage;
    int32_t status_code = 0;
    std::string status_message;
    bool done = false;
  };
  std::map<uint64_t, Record> records;
  int messages = 0;

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<pb::GenerateBatchRequest, pb::GenerateBatchResponse>>
      stream_;
};

pb::BatchStart* AddStart(pb::GenerateBatchRequest* request, uint64_t id,
                         const pb::GenerateRequest& generate, int32_t window = 0) {
  pb::BatchStart* start = request->add_starts();
  start->set_id(id);
  *start->mutable_request() = generate;
  start->set_window(window);
  return start;
}

void AddCredit(pb::GenerateBatchRequest* request, uint64_t id, int32_t items) {
  pb::BatchCredit* credit = request->add_credits();
  credit->set_id(id);
  credit->set_items(items);
}

TEST_F(RouterServerTest, BatchStreamCarriesEveryRequestsTokensOneMessagePerStep) {
  StartRouter(SchedulerOptions{});
  BatchClient client(*stub_);
  pb::GenerateBatchRequest starts;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i) {
    AddStart(&starts, 10 + i, Request(Prompt(9 + 5 * i, i), 8), /*window=*/64);
    ids.push_back(10 + i);
  }
  ASSERT_TRUE(client.Send(starts));
  ASSERT_TRUE(client.ReadUntilDone(ids));
  int items = 0;
  for (int i = 0; i < 4; ++i) {
    const BatchClient::Record& r = client.records[10 + i];
    EXPECT_EQ(r.status_code, 0) << r.status_message;
    EXPECT_THAT(r.token_ids, ElementsAreArray(EngineGreedy(Prompt(9 + 5 * i, i), 8))) << i;
    EXPECT_EQ(r.finish, pb::FINISH_REASON_LENGTH);
    EXPECT_EQ(r.usage.completion_tokens(), 8);
    // One item per token, as Generate's one message per token, and at most a token-less final.
    EXPECT_EQ(r.items - r.items_without_tokens, 8);
    EXPECT_LE(r.items_without_tokens, 1);
    items += r.items;
  }
  // The four decode in the same steps: their tokens share messages (Generate: 32 messages).
  EXPECT_LT(client.messages, items / 2);
  EXPECT_TRUE(client.Close().ok());
}

TEST_F(RouterServerTest, BatchStreamRefusesWithTheStatusGenerateWouldReturn) {
  StartRouter(SchedulerOptions{});
  BatchClient client(*stub_);
  pb::GenerateBatchRequest request;
  pb::GenerateRequest negative = Request({1, 2, 3}, 2);
  negative.set_max_tokens(-1);
  AddStart(&request, 1, negative);
  pb::GenerateRequest other_model = Request({1, 2, 3}, 2);
  other_model.set_model("not-tiny");
  AddStart(&request, 2, other_model);
  AddStart(&request, 3, Request({1, 2, 3}, 2), /*window=*/5000);
  AddStart(&request, 4, Request({4, 5, 6}, 3));
  ASSERT_TRUE(client.Send(request));
  ASSERT_TRUE(client.ReadUntilDone({1, 2, 3, 4}));
  EXPECT_EQ(client.records[1].status_code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(client.records[1].status_message, HasSubstr("negative"));
  EXPECT_EQ(client.records[2].status_code, grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(client.records[3].status_code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(client.records[3].status_message, HasSubstr("window"));
  // The refusals cost the good request nothing.
  EXPECT_EQ(client.records[4].status_code, 0);
  EXPECT_THAT(client.records[4].token_ids, ElementsAreArray(EngineGreedy({4, 5, 6}, 3)));
  EXPECT_TRUE(client.Close().ok());
}

TEST_F(RouterServerTest, BatchStreamHoldsOnlyTheRequestWithoutCredit) {
  // Request 1 may have 2 items unacknowledged, and its router stream holds 3 tokens: it stops
  // after 5 tokens until credited, while request 2 on the same stream runs to the end.
  SchedulerOptions options;
  options.stream_capacity = 3;
  StartRouter(options);
  BatchClient client(*stub_);
  pb::GenerateBatchRequest request;
  const auto prompt = Prompt(14, 5);
  AddStart(&request, 1, Request(prompt, 12), /*window=*/2);
  AddStart(&request, 2, Request(Prompt(10, 6), 24), /*window=*/64);
  ASSERT_TRUE(client.Send(request));
  ASSERT_TRUE(client.ReadUntilDone({2}));
  EXPECT_EQ(client.records[2].token_ids.size(), 24u);
  EXPECT_FALSE(client.records[1].done);
  EXPECT_EQ(client.records[1].items, 2);  // the window, though it had 24 steps to go further
  // A duplicate of a running id is refused; the running request goes on.
  pb::GenerateBatchRequest again;
  AddStart(&again, 1, Request(prompt, 12));
  ASSERT_TRUE(client.Send(again));
  while (client.records[1].status_code == 0) ASSERT_TRUE(client.ReadOne());
  EXPECT_THAT(client.records[1].status_message, HasSubstr("already running"));
  client.records[1] = {};
  pb::GenerateBatchRequest credit;
  AddCredit(&credit, 1, 100);
  ASSERT_TRUE(client.Send(credit));
  ASSERT_TRUE(client.ReadUntilDone({1}));
  const auto expected = EngineGreedy(prompt, 12);
  // The two items read before the credit, then the rest.
  ASSERT_EQ(client.records[1].token_ids.size(), 10u);
  EXPECT_THAT(client.records[1].token_ids, ElementsAreArray(expected.begin() + 2, expected.end()));
  EXPECT_EQ(client.records[1].finish, pb::FINISH_REASON_LENGTH);
  EXPECT_TRUE(client.Close().ok());
}

TEST_F(RouterServerTest, BatchStreamCancelAbortsOneRequest) {
  SchedulerOptions options;
  options.stream_capacity = 1;
  StartRouter(options);
  BatchClient client(*stub_);
  pb::GenerateBatchRequest request;
  AddStart(&request, 7, Request(Prompt(11, 2), 200), /*window=*/1);
  AddStart(&request, 8, Request(Prompt(12, 3), 4));
  ASSERT_TRUE(client.Send(request));
  ASSERT_TRUE(client.ReadUntilDone({8}));
  pb::GenerateBatchRequest cancel;
  cancel.add_cancels(7);
  AddCredit(&cancel, 7, 1000);
  ASSERT_TRUE(client.Send(cancel));
  ASSERT_TRUE(client.ReadUntilDone({7}));
  EXPECT_EQ(client.records[7].finish, pb::FINISH_REASON_ABORT);
  EXPECT_LT(client.records[7].token_ids.size(), 200u);
  EXPECT_EQ(client.records[8].finish, pb::FINISH_REASON_LENGTH);
  EXPECT_TRUE(client.Close().ok());
  pb::GetStatsResponse stats;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->GetStats(&context, pb::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.num_requests_running(), 0);
}

TEST_F(RouterServerTest, BatchStreamEndsAfterItsRequestsWhenTheRouterDrains) {
  StartRouter(SchedulerOptions{});
  BatchClient client(*stub_);
  pb::GenerateBatchRequest request;
  // Held by its window (2 items) until credited, so it runs while the late one comes.
  AddStart(&request, 1, Request(Prompt(13, 4), 40), /*window=*/2);
  ASSERT_TRUE(client.Send(request));
  while (client.records[1].items < 2) ASSERT_TRUE(client.ReadOne());
  server_->BeginDrain();
  pb::GenerateBatchRequest late;
  AddStart(&late, 2, Request(Prompt(9, 1), 4));
  ASSERT_TRUE(client.Send(late));
  ASSERT_TRUE(client.ReadUntilDone({2}));
  pb::GenerateBatchRequest credit;
  AddCredit(&credit, 1, 100);
  ASSERT_TRUE(client.Send(credit));
  // The running one ends, and then the stream ends without the client closing its side.
  while (client.ReadOne()) {
  }
  EXPECT_EQ(client.records[1].finish, pb::FINISH_REASON_LENGTH);
  EXPECT_EQ(client.records[1].token_ids.size(), 40u);
  EXPECT_EQ(client.records[2].status_code, grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace moe::router
