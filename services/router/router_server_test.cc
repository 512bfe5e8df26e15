// The router in-process on port 0 over the tiny preset: streamed Generate tokens equal the
// embedded engine's greedy output; bad input and overload map to the documented gRPC codes.
#include "services/router/router_server.h"

#include <memory>
#include <string>
#include <vector>

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

  pb::GetStatsResponse stats;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->GetStats(&context, pb::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.model(), "tiny");
  EXPECT_EQ(stats.router_id(), "r0");
  EXPECT_EQ(stats.kv_blocks_total(), 256);
  EXPECT_EQ(stats.num_requests_running(), 0);
  EXPECT_EQ(stats.expert_load().num_experts(), 8);
  EXPECT_EQ(registry_.Value("moe_requests_total", {{"model", "tiny"}, {"finish_reason", "length"}})
                .value_or(-1),
            2);
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

}  // namespace
}  // namespace moe::router
