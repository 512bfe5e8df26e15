#include "services/expert-worker/expert_worker_server.h"

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/method_policy.h"
#include "common/metrics/registry.h"
#include "common/model/make_model.h"
#include "common/nccl/testing/fake_communicator.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"

namespace moe::expert_worker {
namespace {

namespace pb = ::moe::expert_worker::v1;

class ExpertWorkerServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = common::testing::MakeTempDir("expert_worker_server_test");
    model::MakeModelOptions make;
    ASSERT_OK(model::MakeModel(make, dir_));
    ExpertWorkerCoreOptions o;
    o.model_dir = dir_;
    o.experts = {"*:0-1"};
    auto core = ExpertWorkerCore::Create(o, registry_, common::SystemClock::Get());
    ASSERT_OK(core.status());
    core_ = std::move(*core);
    service_ = std::make_unique<ExpertWorkerServer>(core_.get());
    service_->EnableNccl(nccl_);
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    runner_ = std::make_unique<common::rpc::ServerRunner>(so);
    runner_->AddService(service_.get());
    ASSERT_OK(runner_->Start());
    auto channel = common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner_->port()));
    ASSERT_OK(channel.status());
    stub_ = pb::ExpertWorker::NewStub(*channel);
  }

  pb::RunExpertsRequest Request(int layer, const std::vector<int>& experts, int tokens) {
    const int64_t hidden = core_->config().hidden_size;
    pb::RunExpertsRequest req;
    req.set_layer_idx(layer);
    for (int e : experts) {
      pb::ExpertBatch* b = req.add_batches();
      b->set_expert_id(e);
      b->mutable_activations()->set_dtype(moe::common::v1::DTYPE_F32);
      b->mutable_activations()->add_shape(tokens);
      b->mutable_activations()->add_shape(hidden);
      std::vector<float> x(static_cast<size_t>(tokens * hidden));
      for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>((i + e) % 23);
      b->mutable_activations()->set_data(x.data(), x.size() * 4);
    }
    return req;
  }

  pb::NegotiateTransportResponse Negotiate(std::vector<pb::TransportKind> accept) {
    pb::NegotiateTransportRequest req;
    for (pb::TransportKind k : accept) req.add_accept(k);
    pb::NegotiateTransportResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->NegotiateTransport(&ctx, req, &resp).ok());
    return resp;
  }

  std::string dir_;
  // NCCL through the in-process fake: the id exchange is real gRPC, the communicator is not.
  nccl::testing::FakeCommunicatorFactory nccl_factory_;
  NcclBootstrap nccl_{nccl_factory_, {.join_timeout = absl::Seconds(60)}};
  common::metrics::Registry registry_;  // isolated: this test's metrics only
  std::unique_ptr<ExpertWorkerCore> core_;
  std::unique_ptr<ExpertWorkerServer> service_;
  std::unique_ptr<common::rpc::ServerRunner> runner_;
  std::unique_ptr<pb::ExpertWorker::Stub> stub_;
};

TEST_F(ExpertWorkerServerTest, RunExpertsMatchesTheCoreBitwise) {
  ASSERT_OK(core_->WarmUp());
  pb::RunExpertsRequest req = Request(1, {1, 0}, 3);
  pb::RunExpertsResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub_->RunExperts(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.outputs_size(), 2);
  const int64_t hidden = core_->config().hidden_size;
  for (int i = 0; i < 2; ++i) {
    const auto& in = req.batches(i).activations().data();
    std::vector<float> want(in.size() / 4);
    engine::ExpertCall call{
        1,
        hidden,
        {{req.batches(i).expert_id(), 3, reinterpret_cast<const float*>(in.data()), want.data()}}};
    ASSERT_OK(core_->Run(call));
    EXPECT_EQ(resp.outputs(i).expert_id(), req.batches(i).expert_id());
    EXPECT_EQ(resp.outputs(i).outputs().shape(0), 3);
    ASSERT_EQ(resp.outputs(i).outputs().data().size(), in.size());
    EXPECT_EQ(std::memcmp(resp.outputs(i).outputs().data().data(), want.data(), in.size()), 0);
  }
}

TEST_F(ExpertWorkerServerTest, MapsErrorsToGrpcCodes) {
  pb::RunExpertsResponse resp;
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->RunExperts(&ctx, Request(0, {0}, 1), &resp).error_code(),
              grpc::StatusCode::UNAVAILABLE);  // not warmed up
  }
  ASSERT_OK(core_->WarmUp());
  {
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->RunExperts(&ctx, Request(0, {5}, 1), &resp).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    pb::RunExpertsRequest bad = Request(0, {0}, 2);
    bad.mutable_batches(0)->mutable_activations()->mutable_data()->resize(7);
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->RunExperts(&ctx, bad, &resp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // A row count whose byte size overflows int64 (2^56 + 1 rows of hidden 64 floats wraps to
    // one row's bytes) is refused, not read past the one row that was sent (the request fuzzer's
    // finding).
    pb::RunExpertsRequest huge = Request(0, {0}, 1);
    huge.mutable_batches(0)->mutable_activations()->set_shape(0, (int64_t{1} << 56) + 1);
    grpc::ClientContext ctx;
    EXPECT_EQ(stub_->RunExperts(&ctx, huge, &resp).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    // A caller in another numerics mode is refused, naming the setting to align.
    pb::RunExpertsRequest other = Request(0, {0}, 2);
    other.set_activations(pb::ACTIVATIONS_BF16);
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->RunExperts(&ctx, other, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("core.activations"));
  }
  {
    // Likewise a caller whose weights were loaded in another mode (q8_0 vs as stored).
    pb::RunExpertsRequest other = Request(0, {0}, 2);
    other.set_weights(pb::WEIGHTS_Q8_0);
    grpc::ClientContext ctx;
    const grpc::Status s = stub_->RunExperts(&ctx, other, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), ::testing::HasSubstr("core.weights"));
  }
}

TEST_F(ExpertWorkerServerTest, LoadAndUnloadReportTheResidentSet) {
  ASSERT_OK(core_->WarmUp());
  pb::LoadExpertsRequest load;
  auto* k = load.add_experts();
  k->set_layer_idx(1);
  k->set_expert_id(7);
  pb::LoadExpertsResponse loaded;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->LoadExperts(&ctx, load, &loaded).ok());
  }
  EXPECT_EQ(loaded.resident_size(), 5);
  pb::RunExpertsResponse resp;
  {
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->RunExperts(&ctx, Request(1, {7}, 2), &resp).ok());
  }
  pb::UnloadExpertsRequest unload;
  *unload.add_experts() = load.experts(0);
  pb::UnloadExpertsResponse unloaded;
  {
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->UnloadExperts(&ctx, unload, &unloaded).ok());
  }
  EXPECT_EQ(unloaded.resident_size(), 4);
  EXPECT_LT(unloaded.resident_bytes(), loaded.resident_bytes());
}

// The control plane decides who gets shared memory: only callers the authorizer admits, that
// ask for it, and that run on this host (same boot id) get a ticket; everyone else keeps gRPC.
TEST_F(ExpertWorkerServerTest, NegotiateTransportOffersSharedMemoryOnlyToAdmittedCallersHere) {
  CoreCallHandler handler(*core_);
  ShmServerOptions shm_options;
  shm_options.dir = dir_;
  common::metrics::Registry shm_registry;
  auto shm = ShmServer::Start(shm_options, handler, shm_registry, common::SystemClock::Get());
  ASSERT_OK(shm.status());
  ExpertWorkerServer service(core_.get());
  service.EnableSharedMemory(**shm, "boot-a");
  std::atomic<bool> admit{true};
  service.SetTransportAuthorizer([&admit](const ::grpc::ServerContext&) {
    return admit.load() ? absl::OkStatus() : absl::PermissionDeniedError("not this caller");
  });
  common::rpc::ServerOptions so;
  so.host = "127.0.0.1";
  common::rpc::ServerRunner runner(so);
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  auto channel = common::rpc::CreateChannel(absl::StrCat("127.0.0.1:", runner.port()));
  ASSERT_OK(channel.status());
  auto stub = pb::ExpertWorker::NewStub(*channel);
  auto negotiate = [&stub](bool wants_shm, const std::string& boot_id,
                           pb::NegotiateTransportResponse* resp) {
    pb::NegotiateTransportRequest req;
    if (wants_shm) req.add_accept(pb::TRANSPORT_KIND_SHARED_MEMORY);
    req.set_boot_id(boot_id);
    ::grpc::ClientContext ctx;
    return stub->NegotiateTransport(&ctx, req, resp);
  };

  pb::NegotiateTransportResponse resp;
  ASSERT_TRUE(negotiate(true, "boot-a", &resp).ok());
  ASSERT_EQ(resp.transport_case(), pb::NegotiateTransportResponse::kSharedMemory);
  EXPECT_EQ(resp.shared_memory().ticket().size(), 16u);
  EXPECT_EQ(resp.shared_memory().socket_path(), (*shm)->socket_path());
  EXPECT_EQ(resp.shared_memory().ring_bytes(), static_cast<uint64_t>(shm_options.ring_bytes));

  resp.Clear();
  ASSERT_TRUE(negotiate(true, "boot-b", &resp).ok());
  ASSERT_EQ(resp.transport_case(), pb::NegotiateTransportResponse::kGrpc);
  EXPECT_THAT(resp.grpc().reason(), ::testing::HasSubstr("another host"));

  resp.Clear();
  ASSERT_TRUE(negotiate(false, "boot-a", &resp).ok());
  EXPECT_EQ(resp.transport_case(), pb::NegotiateTransportResponse::kGrpc);

  admit = false;
  resp.Clear();
  const ::grpc::Status refused = negotiate(true, "boot-a", &resp);
  EXPECT_EQ(refused.error_code(), ::grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(resp.transport_case(), pb::NegotiateTransportResponse::TRANSPORT_NOT_SET);
  runner.Shutdown(absl::Now());
}

TEST_F(ExpertWorkerServerTest, NcclOfferCarriesTheUniqueIdTheCallerJoinsWith) {
  const pb::NegotiateTransportResponse resp =
      Negotiate({pb::TRANSPORT_KIND_NCCL, pb::TRANSPORT_KIND_SHARED_MEMORY});
  ASSERT_TRUE(resp.has_nccl()) << resp.DebugString();
  EXPECT_EQ(resp.nccl().num_ranks(), 2);
  EXPECT_EQ(resp.nccl().worker_rank(), 1);
  EXPECT_EQ(resp.nccl().caller_rank(), 0);
  ASSERT_OK_AND_ASSIGN(nccl::UniqueId id, nccl::UniqueIdFromBytes(resp.nccl().unique_id()));
  // The router's side: join the communicator the worker is joining, with the id from the wire.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<nccl::Communicator> router,
                       nccl_factory_.Join(id, resp.nccl().num_ranks(), resp.nccl().caller_rank(),
                                          absl::Seconds(60)));
  nccl_.WaitIdle();
  EXPECT_EQ(nccl_.num_joined(), 1);
  EXPECT_EQ(nccl_.num_failed(), 0);
  std::vector<std::unique_ptr<nccl::Communicator>> joined = nccl_.TakeJoined();
  ASSERT_EQ(joined.size(), 1u);
  EXPECT_EQ(joined[0]->rank(), 1);
  EXPECT_EQ(router->rank(), 0);
}

TEST_F(ExpertWorkerServerTest, NcclOnlyWhenTheCallerPrefersIt) {
  // Shared memory first (disabled here): gRPC, and no NCCL join is started.
  pb::NegotiateTransportResponse resp =
      Negotiate({pb::TRANSPORT_KIND_SHARED_MEMORY, pb::TRANSPORT_KIND_NCCL});
  ASSERT_TRUE(resp.has_grpc());
  EXPECT_THAT(resp.grpc().reason(), ::testing::HasSubstr("shared memory is disabled"));
  resp = Negotiate({});
  ASSERT_TRUE(resp.has_grpc());
  EXPECT_THAT(resp.grpc().reason(), ::testing::HasSubstr("gRPC only"));
  nccl_.WaitIdle();
  EXPECT_EQ(nccl_.num_joined() + nccl_.num_failed(), 0);
}

// mTLS with auth: routers run experts and negotiate, the admin loads and unloads; plaintext,
// certificate-less and foreign-CA callers never reach a handler (SECURITY.md).
TEST_F(ExpertWorkerServerTest, EveryMethodServesOnlyItsRoles) {
  common::rpc::testing::ClusterPki pki(common::testing::MakeTempDir("expert_worker_auth"));
  const common::rpc::ServerOptions grpc = pki.Server();
  ASSERT_OK_AND_ASSIGN(auto auth,
                       common::rpc::Authorizer::Create(grpc.auth, "expert-worker", registry_,
                                                       common::SystemClock::Get()));
  ExpertWorkerServer service(core_.get());
  service.SetAuthorizer(*auth);
  common::rpc::ServerRunner runner(grpc);
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  const auto* descriptor = google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      pb::ExpertWorker::service_full_name());
  ASSERT_NE(descriptor, nullptr);
  pki.ExpectEveryMethodGuarded(absl::StrCat("127.0.0.1:", runner.port()), *descriptor,
                               kExpertWorkerPolicies);
  EXPECT_THAT(registry_.Value("moe_rpc_refused_total", {{"service", "expert-worker"},
                                                        {"method", "LoadExperts"},
                                                        {"code", "PERMISSION_DENIED"}}),
              common::testing::IsOkAndHolds(2.0));  // the gateway's and the router's
  runner.Shutdown(absl::Now());
}

}  // namespace
}  // namespace moe::expert_worker
