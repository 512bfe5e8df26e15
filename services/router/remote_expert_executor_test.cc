// RemoteExpertExecutor against in-process expert workers (tiny preset) over both data planes:
// transport choice, bitwise-identical rows, the gRPC fallback for calls the rings cannot hold,
// and deadlines that follow the work (a slow but healthy worker keeps its calls and its health).
#include "services/router/remote_expert_executor.h"

#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/engine/local_expert_executor.h"
#include "common/grpc/server_runner.h"
#include "common/kernels/thread_pool.h"
#include "common/metrics/registry.h"
#include "common/model/checkpoint.h"
#include "common/model/make_model.h"
#include "common/shm/handshake.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/core/shm_server.h"
#include "services/expert-worker/expert_worker_server.h"

namespace moe::router {
namespace {

using common::testing::StatusIs;

// The core's handler, `delay` slower per call (a slow but healthy worker).
class SlowHandler final : public expert_worker::ExpertCallHandler {
 public:
  SlowHandler(expert_worker::ExpertWorkerCore& core, absl::Duration delay)
      : inner_(core), delay_(delay) {}
  int64_t hidden() const override { return inner_.hidden(); }
  absl::Status Run(const engine::ExpertCall& call, absl::Duration* compute) override {
    absl::SleepFor(delay_);  // the slowness under test (real time: deadlines are real)
    return inner_.Run(call, compute);
  }

 private:
  expert_worker::CoreCallHandler inner_;
  const absl::Duration delay_;
};

// One in-process expert worker holding every expert: gRPC server, and shared memory unless off.
struct TestWorker {
  std::unique_ptr<common::metrics::Registry> registry =
      std::make_unique<common::metrics::Registry>();
  std::unique_ptr<expert_worker::ExpertWorkerCore> core;
  std::unique_ptr<expert_worker::ExpertCallHandler> handler;
  std::unique_ptr<expert_worker::ShmServer> shm;
  std::unique_ptr<expert_worker::ExpertWorkerServer> service;
  std::unique_ptr<common::rpc::ServerRunner> runner;
  std::string address;
};

class RemoteExpertExecutorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("remote_experts"));
    ASSERT_OK(model::MakeModel({}, *dir_ + "/tiny"));
  }

  std::unique_ptr<TestWorker> StartWorker(bool shm, int64_t ring_bytes = 1 << 20,
                                          absl::Duration delay = absl::ZeroDuration(),
                                          int port = 0) {
    auto w = std::make_unique<TestWorker>();
    expert_worker::ExpertWorkerCoreOptions o;
    o.model_dir = *dir_ + "/tiny";
    o.experts = {"*:0-7"};
    auto core = expert_worker::ExpertWorkerCore::Create(o, *w->registry, clock_);
    EXPECT_OK(core.status());
    w->core = std::move(*core);
    EXPECT_OK(w->core->WarmUp());
    if (delay > absl::ZeroDuration()) {
      w->handler = std::make_unique<SlowHandler>(*w->core, delay);
    } else {
      w->handler = std::make_unique<expert_worker::CoreCallHandler>(*w->core);
    }
    w->service = std::make_unique<expert_worker::ExpertWorkerServer>(w->core.get());
    if (shm) {
      expert_worker::ShmServerOptions so;
      so.dir = *dir_;
      so.ring_bytes = ring_bytes;
      auto s = expert_worker::ShmServer::Start(so, *w->handler, *w->registry, clock_);
      EXPECT_OK(s.status());
      w->shm = std::move(*s);
      w->service->EnableSharedMemory(*w->shm, shm::HostBootId());
    }
    common::rpc::ServerOptions so;
    so.host = "127.0.0.1";
    so.port = port;
    w->runner = std::make_unique<common::rpc::ServerRunner>(so);
    w->runner->AddService(w->service.get());
    EXPECT_OK(w->runner->Start());
    w->runner->SetServing(true);
    w->address = absl::StrCat("127.0.0.1:", w->runner->port());
    return w;
  }

  std::unique_ptr<RemoteExpertExecutor> Executor(const std::vector<std::string>& workers,
                                                 RemoteExpertsOptions o = {}) {
    o.workers = workers;
    auto config = model::LoadModelConfig(*dir_ + "/tiny");
    EXPECT_OK(config.status());
    config_ = *config;
    auto ex = RemoteExpertExecutor::Create(o, config_, registry_, clock_);
    EXPECT_OK(ex.status());
    return ex.ok() ? std::move(*ex) : nullptr;
  }

  // A layer-0 call with `rows` rows for each of experts 0..7 (random inputs).
  struct Call {
    engine::ExpertCall call;
    std::vector<float> in, out;
  };
  Call MakeCall(int64_t rows, uint32_t seed) {
    Call c;
    const int64_t hidden = config_.hidden_size;
    c.in.resize(static_cast<size_t>(8 * rows * hidden));
    c.out.assign(c.in.size(), -1.0f);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1, 1);
    for (float& x : c.in) x = u(rng);
    c.call.layer_idx = 0;
    c.call.hidden = hidden;
    for (int e = 0; e < 8; ++e) {
      c.call.batches.push_back(
          {e, rows, c.in.data() + e * rows * hidden, c.out.data() + e * rows * hidden});
    }
    return c;
  }
  // The same call's rows from the in-process executor (the embedded engine's path).
  std::vector<float> Local(const Call& c) {
    auto ckpt = model::Checkpoint::Open(*dir_ + "/tiny");
    EXPECT_OK(ckpt.status());
    kernels::ThreadPool pool(1);
    engine::LocalExpertExecutor local(&(*ckpt)->weights(), &pool);
    Call copy = c;
    for (size_t i = 0; i < copy.call.batches.size(); ++i) {
      copy.call.batches[i].input = copy.in.data() + (c.call.batches[i].input - c.in.data());
      copy.call.batches[i].output = copy.out.data() + (c.call.batches[i].output - c.out.data());
    }
    auto h = local.Submit(copy.call);
    EXPECT_OK(h.status());
    EXPECT_OK(local.Await(*h));
    return copy.out;
  }
  double Metric(const std::string& name, const common::metrics::Labels& labels) {
    return registry_.Value(name, labels).value_or(-1);
  }

  static std::string* dir_;
  common::SystemClock& clock_ = common::SystemClock::Get();
  common::metrics::Registry registry_;
  model::ModelConfig config_;
};
std::string* RemoteExpertExecutorTest::dir_ = nullptr;

TEST(ExpertCallTimeoutTest, FollowsTheWorkBetweenTheFloorAndTheCap) {
  model::ModelConfig mixtral;
  mixtral.hidden_size = 4096;
  mixtral.moe_intermediate_size = 14336;
  RemoteExpertsOptions o;  // 2 s floor, 1 GFLOP/s, 10 min cap
  EXPECT_EQ(ExpertCallTimeout(o, mixtral, 0), absl::Seconds(2));
  // 0.352 GFLOP per row: a 1024-row prefill share gets 2 s + ~361 s.
  EXPECT_NEAR(absl::ToDoubleSeconds(ExpertCallTimeout(o, mixtral, 1024)), 2 + 360.8, 0.1);
  EXPECT_EQ(ExpertCallTimeout(o, mixtral, 1 << 20), absl::Minutes(10));
  o.min_expert_gflops = 100;
  EXPECT_NEAR(absl::ToDoubleSeconds(ExpertCallTimeout(o, mixtral, 64)), 2.225, 0.001);
}

TEST_F(RemoteExpertExecutorTest, PicksSharedMemoryWhereOfferedAndRowsAreBitwiseTheSame) {
  auto with_shm = StartWorker(/*shm=*/true);
  auto without = StartWorker(/*shm=*/false);
  auto ex = Executor({with_shm->address, without->address}, {.replicas = 1});
  ASSERT_NE(ex, nullptr);
  EXPECT_EQ(ex->transport(0), "shm");
  EXPECT_EQ(ex->transport(1), "grpc");  // "shared memory is disabled on this worker"
  for (uint32_t seed = 0; seed < 4; ++seed) {
    Call c = MakeCall(3 + seed, seed);
    ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c.call));
    ASSERT_OK(ex->Await(h));
    EXPECT_EQ(c.out, Local(c)) << seed;
  }
  // Round robin: even experts on worker 0 (shm), odd on worker 1 (gRPC).
  EXPECT_EQ(Metric("moe_expert_calls_total", {{"worker", "0"}, {"transport", "shm"}}), 4);
  EXPECT_EQ(Metric("moe_expert_calls_total", {{"worker", "0"}, {"transport", "grpc"}}), 0);
  EXPECT_EQ(Metric("moe_expert_calls_total", {{"worker", "1"}, {"transport", "grpc"}}), 4);
  EXPECT_EQ(Metric("moe_expert_transport_shm", {{"worker", "0"}}), 1);
  EXPECT_EQ(with_shm->registry->Value("moe_expert_worker_shm_calls_total").value(), 4);
}

TEST_F(RemoteExpertExecutorTest, TransportGrpcNeverNegotiates) {
  auto w = StartWorker(/*shm=*/true);
  auto ex = Executor({w->address}, {.transport = ExpertTransport::kGrpc});
  EXPECT_EQ(ex->transport(0), "grpc");
  Call c = MakeCall(2, 7);
  ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c.call));
  ASSERT_OK(ex->Await(h));
  EXPECT_EQ(c.out, Local(c));
  EXPECT_EQ(w->shm->regions(), 0);
}

TEST_F(RemoteExpertExecutorTest, CallsTheRingsCannotHoldGoOverGrpcWithTheSameRows) {
  auto w = StartWorker(/*shm=*/true, /*ring_bytes=*/8192);
  auto ex = Executor({w->address});
  ASSERT_EQ(ex->transport(0), "shm");
  Call small = MakeCall(1, 1), big = MakeCall(4, 2);  // 8 x 256 B, 8 x 1 KiB (> half a ring)
  for (Call* c : {&small, &big}) {
    ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c->call));
    ASSERT_OK(ex->Await(h));
    EXPECT_EQ(c->out, Local(*c));
  }
  EXPECT_EQ(Metric("moe_expert_calls_total", {{"worker", "0"}, {"transport", "shm"}}), 1);
  EXPECT_EQ(Metric("moe_expert_calls_total", {{"worker", "0"}, {"transport", "grpc"}}), 1);
  EXPECT_EQ(Metric("moe_expert_shm_fallbacks_total", {{"worker", "0"}}), 1);
}

TEST_F(RemoteExpertExecutorTest, TwoCallsInFlightAwaitedInEitherOrder) {
  auto w = StartWorker(/*shm=*/true);
  auto ex = Executor({w->address});
  Call a = MakeCall(2, 3), b = MakeCall(5, 4);
  ASSERT_OK_AND_ASSIGN(auto ha, ex->Submit(a.call));
  ASSERT_OK_AND_ASSIGN(auto hb, ex->Submit(b.call));
  ASSERT_OK(ex->Await(hb));
  ASSERT_OK(ex->Await(ha));
  EXPECT_EQ(a.out, Local(a));
  EXPECT_EQ(b.out, Local(b));
}

// Deliver 5: a worker 300 ms slower than the deadline floor, on a call whose work-based
// deadline is far longer, is slow, not dead: the call succeeds and the worker stays healthy.
// With the deadline pinned to the floor (call_timeout_max = call_timeout) the same worker would
// be marked down and its experts reported as having no live replica.
TEST_F(RemoteExpertExecutorTest, ASlowButHealthyWorkerKeepsItsCallsAndItsHealth) {
  auto w = StartWorker(/*shm=*/true, 1 << 20, /*delay=*/absl::Milliseconds(300));
  RemoteExpertsOptions o;
  o.transport = ExpertTransport::kShm;
  o.call_timeout = absl::Milliseconds(50);
  // 6 x 64 x 128 FLOPs per row: 8 x 64 rows = 25 MFLOP at 0.01 GFLOP/s = 2.5 s of deadline.
  o.min_expert_gflops = 0.01;
  o.max_attempts = 1;
  auto ex = Executor({w->address}, o);
  EXPECT_GT(ExpertCallTimeout(o, config_, 8 * 64), absl::Seconds(2));
  Call c = MakeCall(64, 5);
  ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c.call));
  ASSERT_OK(ex->Await(h));
  EXPECT_EQ(c.out, Local(c));
  EXPECT_TRUE(ex->healthy(0));

  o.call_timeout_max = o.call_timeout;  // the old fixed deadline
  auto fixed = Executor({w->address}, o);
  Call d = MakeCall(64, 6);
  ASSERT_OK_AND_ASSIGN(auto h2, fixed->Submit(d.call));
  std::vector<int32_t> unavailable;
  ASSERT_OK(fixed->AwaitPartial(h2, &unavailable));
  EXPECT_EQ(unavailable.size(), 8u);  // "no live replica"
  EXPECT_FALSE(fixed->healthy(0));
}

// The same over gRPC: real compute of 2048 rows against a 1 ms floor.
TEST_F(RemoteExpertExecutorTest, OverGrpcTheDeadlineAlsoFollowsTheWork) {
  auto w = StartWorker(/*shm=*/false);
  RemoteExpertsOptions o;
  o.transport = ExpertTransport::kGrpc;
  o.call_timeout = absl::Milliseconds(1);
  o.min_expert_gflops = 0.01;
  o.max_attempts = 1;
  auto ex = Executor({w->address}, o);
  Call c = MakeCall(256, 8);
  ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c.call));
  ASSERT_OK(ex->Await(h));
  EXPECT_EQ(c.out, Local(c));
  EXPECT_TRUE(ex->healthy(0));
}

TEST_F(RemoteExpertExecutorTest, ADeadWorkerIsRoutedAroundAndRenegotiatedWhenBack) {
  auto a = StartWorker(/*shm=*/true);
  auto b = StartWorker(/*shm=*/true);
  const int port = a->runner->port();
  RemoteExpertsOptions o;
  o.replicas = 2;
  o.probe_interval = absl::Milliseconds(20);
  auto ex = Executor({a->address, b->address}, o);
  ASSERT_EQ(ex->transport(0), "shm");
  a.reset();  // worker 0 goes away: its region closes, its gRPC port too
  for (int i = 0; i < 4; ++i) {
    Call c = MakeCall(2, 10 + i);
    ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c.call));
    ASSERT_OK(ex->Await(h));  // retried on worker 1 where needed
    EXPECT_EQ(c.out, Local(c));
  }
  EXPECT_FALSE(ex->healthy(0));
  // Back on its port with a new region to offer: probed healthy and renegotiated.
  a = StartWorker(/*shm=*/true, 1 << 20, absl::ZeroDuration(), port);
  const absl::Time until = absl::Now() + absl::Seconds(10);
  while (!ex->healthy(0) && absl::Now() < until) absl::SleepFor(absl::Milliseconds(5));
  EXPECT_TRUE(ex->healthy(0));
  EXPECT_EQ(ex->transport(0), "shm");
  Call c = MakeCall(3, 20);
  ASSERT_OK_AND_ASSIGN(auto h, ex->Submit(c.call));
  ASSERT_OK(ex->Await(h));
  EXPECT_EQ(c.out, Local(c));
}

}  // namespace
}  // namespace moe::router
