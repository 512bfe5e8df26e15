// Chaos on the local cluster (ctest label `chaos`): 64 concurrent SSE streams through the gateway
// while a service is killed with -9 and restarted, or a fault-injecting proxy
// (common/testing/fault_proxy.h) breaks a link on loopback. The oracle is a fault-free run's
// text (greedy; batch invariance makes it the same on every topology). Every stream is one of
//   completed  HTTP 200, the oracle's exact text, finish_reason length, [DONE]
//   failed     a clear error within its deadline: an HTTP error with a JSON body, or an SSE
//              error event followed by [DONE]
//   lost       anything else (wrong text, no end within the deadline, truncated without error)
// Each case prints the three counts and asserts lost == 0 plus its own expectation.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/make_model.h"
#include "common/testing/fault_proxy.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "tests/integration/experts_cluster.h"

namespace moe::testing {
namespace {

using common::testing::FaultProxy;
using Mode = FaultProxy::Mode;

constexpr int kVocab = 512;
constexpr int kStreams = 64;
constexpr int kPromptLen = 40;  // two full 16-token blocks: the kv-store case stores them
constexpr int kMaxTokens = 12;
constexpr absl::Duration kDeadline = absl::Seconds(20);

struct Counts {
  int completed = 0, failed = 0, lost = 0;
};

class ChaosTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (dir_ != nullptr) return;
    dir_ = new std::string(common::testing::MakeTempDir("chaos"));
    ASSERT_OK(model::MakeModel({}, Model()));
    prompts_ = new std::vector<std::vector<int32_t>>(MakePrompts(kStreams, kPromptLen, kVocab, 16));
    // The oracle: the fault-free run, embedded experts, one router.
    auto router = StartRouter(Model(), {}, {}, 1, *dir_);
    ASSERT_OK(router.status());
    auto gateway = StartGateway(Model(), {router->address()}, *dir_);
    ASSERT_OK(gateway.status());
    oracle_ = new std::vector<std::string>();
    for (const SseResult& r : Run(*gateway)) {
      ASSERT_EQ(r.status, 200) << r.error;
      ASSERT_TRUE(r.done && r.error.empty() && r.finish_reason == "length") << r.error;
      oracle_->push_back(r.text);
    }
  }

  static std::string Model() { return *dir_ + "/tiny"; }

  // kStreams concurrent streams; `at_event` runs once, on the stream thread that sees the
  // `trigger`-th SSE event across all streams (0 = never).
  static std::vector<SseResult> Run(const Proc& gateway, int trigger = 0,
                                    const std::function<void()>& at_event = nullptr) {
    std::vector<SseResult> results(kStreams);
    std::atomic<int> events{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kStreams; ++i) {
      threads.emplace_back([&, i] {
        results[i] =
            StreamCompletion(gateway.http_port, "tiny", (*prompts_)[i], kMaxTokens, kDeadline, [&] {
              if (++events == trigger && at_event) at_event();
            });
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

  // Classifies each stream against the oracle and prints the counts.
  static Counts Tally(const std::string& name, const std::vector<SseResult>& results) {
    Counts c;
    for (int i = 0; i < kStreams; ++i) {
      const SseResult& r = results[i];
      const bool in_time = r.elapsed <= kDeadline;
      if (r.status == 200 && r.done && r.ended && r.error.empty() && r.finish_reason == "length" &&
          r.text == (*oracle_)[i] && in_time) {
        ++c.completed;
      } else if (in_time && r.ended && !r.error.empty() &&
                 ((r.status >= 400 && r.status < 600) || (r.status == 200 && r.done))) {
        ++c.failed;
        if (c.failed <= 2)
          std::printf("  %s: stream %d failed: %d %s\n", name.c_str(), i, r.status,
                      r.error.c_str());
      } else {
        ++c.lost;
        std::printf(
            "  %s: stream %d LOST: status %d done %d ended %d finish '%s' error '%s' %s text "
            "after %s\n",
            name.c_str(), i, r.status, r.done, r.ended, r.finish_reason.c_str(), r.error.c_str(),
            r.text == (*oracle_)[i] ? "right" : "wrong", absl::FormatDuration(r.elapsed).c_str());
      }
    }
    std::printf("chaos %s: completed %d / failed-with-a-clear-error %d / lost %d\n", name.c_str(),
                c.completed, c.failed, c.lost);
    std::fflush(stdout);
    EXPECT_EQ(c.lost, 0) << name;
    return c;
  }

  std::vector<Proc> StartWorkers(const std::vector<std::vector<std::string>>& experts,
                                 const std::vector<int>& ports) {
    std::vector<Proc> out;
    for (size_t i = 0; i < experts.size(); ++i) {
      auto w = StartWorker(Model(), experts[i], ports[i], Log("worker"), *dir_);
      EXPECT_OK(w.status());
      if (w.ok()) out.push_back(std::move(*w));
    }
    return out;
  }
  static std::string Log(const std::string& what) {
    static int n = 0;
    return absl::StrCat(*dir_, "/", what, ++n, ".log");
  }
  static void Kill(Proc& p) {
    p.child->Signal(SIGKILL);
    EXPECT_OK(p.child->Wait(absl::Seconds(10)).status());
  }
  static std::vector<int> Ports(int n) {
    std::vector<int> ports;
    for (int i = 0; i < n; ++i) ports.push_back(common::testing::PickFreePort());
    return ports;
  }
  // Runs waves until one has no failure (a restarted peer is probed healthy within a few
  // probe periods); the last wave's counts.
  static Counts RunUntilClean(const std::string& name, const Proc& gateway) {
    Counts c;
    const absl::Time until = absl::Now() + absl::Seconds(20);
    do {
      c = Tally(name, Run(gateway));
    } while (c.failed > 0 && absl::Now() < until);
    return c;
  }

  static std::string* dir_;
  static std::vector<std::vector<int32_t>>* prompts_;
  static std::vector<std::string>* oracle_;
};
std::string* ChaosTest::dir_ = nullptr;
std::vector<std::vector<int32_t>>* ChaosTest::prompts_ = nullptr;
std::vector<std::string>* ChaosTest::oracle_ = nullptr;

TEST_F(ChaosTest, KillingAnExpertWorkerWithReplicasFailsNoStream) {
  const std::vector<int> ports = Ports(3);
  std::vector<Proc> workers = StartWorkers({{"*:0-7"}, {"*:0-7"}, {"*:0-7"}}, ports);
  ASSERT_EQ(workers.size(), 3u);
  auto router = StartRouter(
      Model(), {workers[0].address(), workers[1].address(), workers[2].address()}, {}, 2, *dir_);
  ASSERT_OK(router.status());
  auto gateway = StartGateway(Model(), {router->address()}, *dir_);
  ASSERT_OK(gateway.status());
  const Counts c = Tally("worker-kill-replicas",
                         Run(*gateway, kStreams * 3, [&] { workers[1].child->Signal(SIGKILL); }));
  EXPECT_EQ(c.failed, 0);
  ASSERT_OK(workers[1].child->Wait(absl::Seconds(10)).status());
  auto back = StartWorker(Model(), {"*:0-7"}, ports[1], Log("worker"), *dir_);
  ASSERT_OK(back.status());
  EXPECT_EQ(RunUntilClean("worker-kill-replicas-restarted", *gateway).failed, 0);
}

TEST_F(ChaosTest, KillingAnExpertWorkerWithoutReplicasFailsOnlyWithClearErrors) {
  const std::vector<int> ports = Ports(2);
  std::vector<Proc> workers = StartWorkers({{"*:0-7"}, {"*:0-7"}}, ports);
  ASSERT_EQ(workers.size(), 2u);
  // Experts 0-3 only on worker 0, 4-7 only on worker 1.
  auto router = StartRouter(
      Model(), {workers[0].address(), workers[1].address()},
      {"*:0=0", "*:1=0", "*:2=0", "*:3=0", "*:4=1", "*:5=1", "*:6=1", "*:7=1"}, 1, *dir_);
  ASSERT_OK(router.status());
  auto gateway = StartGateway(Model(), {router->address()}, *dir_);
  ASSERT_OK(gateway.status());
  const Counts c = Tally("worker-kill-no-replica",
                         Run(*gateway, kStreams * 3, [&] { workers[1].child->Signal(SIGKILL); }));
  EXPECT_GT(c.failed, 0);
  ASSERT_OK(workers[1].child->Wait(absl::Seconds(10)).status());
  auto back = StartWorker(Model(), {"*:0-7"}, ports[1], Log("worker"), *dir_);
  ASSERT_OK(back.status());
  EXPECT_EQ(RunUntilClean("worker-kill-no-replica-restarted", *gateway).failed, 0);
}

TEST_F(ChaosTest, KillingARouterRetriesUnstreamedRequestsAndEndsStreamedOnesWithAnError) {
  const std::vector<int> ports = Ports(2);
  auto a = StartRouter(Model(), {}, {}, 1, *dir_, "auto", ports[0]);
  ASSERT_OK(a.status());
  auto b = StartRouter(Model(), {}, {}, 1, *dir_, "auto", ports[1]);
  ASSERT_OK(b.status());
  auto gateway = StartGateway(Model(), {a->address(), b->address()}, *dir_);
  ASSERT_OK(gateway.status());
  const Counts c =
      Tally("router-kill", Run(*gateway, kStreams * 2, [&] { a->child->Signal(SIGKILL); }));
  EXPECT_GT(c.completed, 0);  // router b's streams, and a's retried before their first token
  ASSERT_OK(a->child->Wait(absl::Seconds(10)).status());
  // Router a is down: every request is retried on b before anything streamed.
  EXPECT_EQ(Tally("router-down", Run(*gateway)).failed, 0);
  auto back = StartRouter(Model(), {}, {}, 1, *dir_, "auto", ports[0]);
  ASSERT_OK(back.status());
  EXPECT_EQ(RunUntilClean("router-restarted", *gateway).failed, 0);
}

TEST_F(ChaosTest, KillingTheKvStoreFailsNoStream) {
  const int store_port = common::testing::PickFreePort();
  const std::string l3 = *dir_ + "/l3";
  auto start_store = [&] {
    return LaunchService(
        {BinPath("kv-store"), "--set", "core.l3_dir=" + l3, "--set", "grpc.host=127.0.0.1", "--set",
         absl::StrCat("grpc.port=", store_port), "--set", "metrics.host=127.0.0.1", "--set",
         "metrics.port=0", "--set", "grpc.drain_timeout=1s"},
        Log("kv-store"));
  };
  auto store = start_store();
  ASSERT_OK(store.status());
  const std::string kv =
      absl::StrCat("kv_store:\n  targets: [\"127.0.0.1:", store_port, "\"]\n  fetch_timeout: 3s\n",
                   "  channel: {initial_reconnect_backoff: 50ms, max_reconnect_backoff: 500ms}\n");
  auto a = StartRouter(Model(), {}, {}, 1, *dir_, "auto", 0, kv);
  ASSERT_OK(a.status());
  auto b = StartRouter(Model(), {}, {}, 1, *dir_, "auto", 0, kv);
  ASSERT_OK(b.status());
  auto gateway = StartGateway(Model(), {a->address(), b->address()}, *dir_);
  ASSERT_OK(gateway.status());
  const Counts c =
      Tally("kv-store-kill", Run(*gateway, kStreams * 2, [&] { store->child->Signal(SIGKILL); }));
  EXPECT_EQ(c.failed, 0);
  ASSERT_OK(store->child->Wait(absl::Seconds(10)).status());
  auto back = start_store();
  ASSERT_OK(back.status());
  EXPECT_EQ(Tally("kv-store-restarted", Run(*gateway)).failed, 0);
}

// Network faults through a proxy, on one link, switched on mid-run and off after it.
struct NetCase {
  std::string name;
  bool gateway_to_router;  // else router -> expert worker (transport grpc)
  FaultProxy::Fault fault;
  bool may_fail;  // streams may end with a clear error (else: none fails)
};

class ChaosNetTest : public ChaosTest, public ::testing::WithParamInterface<NetCase> {};

TEST_P(ChaosNetTest, EveryStreamCompletesOrFailsClearly) {
  const NetCase& nc = GetParam();
  std::vector<Proc> workers;
  std::vector<std::unique_ptr<FaultProxy>> proxies;
  std::vector<Proc> routers;
  auto proxy = [&](int port) {
    auto p = FaultProxy::Start(port);
    EXPECT_OK(p.status());
    proxies.push_back(*std::move(p));
    return proxies.back()->address();
  };
  if (nc.gateway_to_router) {
    // Two routers (embedded experts), each behind a proxy; the fault hits router a's.
    for (int i = 0; i < 2; ++i) {
      auto r = StartRouter(Model(), {}, {}, 1, *dir_);
      ASSERT_OK(r.status());
      routers.push_back(std::move(*r));
    }
    // Keepalive short enough that a black-holed link fails its streams well within the
    // client's deadline.
    auto gateway =
        StartGateway(Model(), {proxy(routers[0].grpc_port), proxy(routers[1].grpc_port)}, *dir_,
                     {"routing.channel.keepalive_time=1s", "routing.channel.keepalive_timeout=1s"});
    ASSERT_OK(gateway.status());
    const Counts c =
        Tally(nc.name, Run(*gateway, kStreams * 2, [&] { proxies[0]->Set(nc.fault); }));
    if (!nc.may_fail) {
      EXPECT_EQ(c.failed, 0);
    }
    proxies[0]->Set({});
    EXPECT_EQ(RunUntilClean(nc.name + "-healed", *gateway).failed, 0);
    return;
  }
  // One router, two workers holding every expert (replicas 2) over gRPC; worker 1 behind the
  // proxy.
  workers = StartWorkers({{"*:0-7"}, {"*:0-7"}}, {0, 0});
  ASSERT_EQ(workers.size(), 2u);
  auto router = StartRouter(Model(), {workers[0].address(), proxy(workers[1].grpc_port)}, {}, 2,
                            *dir_, "grpc");
  ASSERT_OK(router.status());
  auto gateway = StartGateway(Model(), {router->address()}, *dir_);
  ASSERT_OK(gateway.status());
  const Counts c = Tally(nc.name, Run(*gateway, kStreams * 2, [&] { proxies[0]->Set(nc.fault); }));
  if (!nc.may_fail) {
    EXPECT_EQ(c.failed, 0);
  }
  proxies[0]->Set({});
  EXPECT_EQ(RunUntilClean(nc.name + "-healed", *gateway).failed, 0);
}

const FaultProxy::Fault kDelay{.mode = Mode::kDelay, .delay = absl::Milliseconds(5)};
const FaultProxy::Fault kDrop{.mode = Mode::kDrop, .after_bytes = 4096};
const FaultProxy::Fault kReset{.mode = Mode::kReset, .after_bytes = 4096};
const FaultProxy::Fault kBlackHole{.mode = Mode::kBlackHole};

INSTANTIATE_TEST_SUITE_P(
    Faults, ChaosNetTest,
    ::testing::Values(NetCase{"gateway-router-delay", true, kDelay, false},
                      NetCase{"gateway-router-drop", true, kDrop, true},
                      NetCase{"gateway-router-reset", true, kReset, true},
                      // Found a real hang before channels had keepalive (31 of 64 streams on a
                      // black-holed router link never ended): now they fail within
                      // keepalive_time + keepalive_timeout.
                      NetCase{"gateway-router-blackhole", true, kBlackHole, true},
                      NetCase{"router-worker-delay", false, kDelay, false},
                      NetCase{"router-worker-drop", false, kDrop, false},
                      NetCase{"router-worker-reset", false, kReset, false},
                      NetCase{"router-worker-blackhole", false, kBlackHole, false}),
    [](const ::testing::TestParamInfo<NetCase>& info) {
      std::string n;
      for (char ch : info.param.name) n += ch == '-' ? '_' : ch;
      return n;
    });

}  // namespace
}  // namespace moe::testing
