// Disaggregated experts end to end (issue 5): 1 router + 3 expert-worker processes on loopback
// against the embedded engine (a router process without workers), on the tiny preset.
#include "tests/integration/experts_cluster.h"

#include <signal.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/model/make_model.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace moe::testing {
namespace {

namespace rpb = ::moe::router::v1;
constexpr int kVocab = 512;

class ExpertsClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(common::testing::MakeTempDir("experts_cluster_test"));
    model::MakeModelOptions make;
    ASSERT_OK(model::MakeModel(make, *dir_ + "/tiny"));
    make.gate_skew = 1.2;
    ASSERT_OK(model::MakeModel(make, *dir_ + "/skewed"));
  }
  static void TearDownTestSuite() { delete dir_; }

  std::string Model(const std::string& name) { return *dir_ + "/" + name; }

  std::vector<Proc> StartWorkers(const std::string& model,
                                 const std::vector<std::vector<std::string>>& experts,
                                 std::vector<int> ports = {}) {
    std::vector<Proc> out;
    for (size_t i = 0; i < experts.size(); ++i) {
      auto w = StartWorker(model, experts[i], ports.empty() ? 0 : ports[i],
                           absl::StrCat(*dir_, "/worker", i, "_", ++launches_, ".log"));
      EXPECT_OK(w.status());
      if (w.ok()) out.push_back(std::move(*w));
    }
    return out;
  }
  static std::vector<std::string> Addresses(const std::vector<Proc>& procs) {
    std::vector<std::string> a;
    for (const auto& p : procs) a.push_back(p.address());
    return a;
  }
  // Greedy tokens of the embedded engine (a router with in-process experts).
  std::vector<std::vector<int32_t>> Reference(const std::string& model,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int max_tokens) {
    auto router = StartRouter(model, {}, {}, 1, *dir_);
    EXPECT_OK(router.status());
    std::vector<std::vector<int32_t>> out;
    for (const GenerateResult& r : GenerateAll(router->address(), prompts, max_tokens)) {
      EXPECT_EQ(r.finish_reason, rpb::FINISH_REASON_LENGTH) << r.rpc_error << r.error_message;
      out.push_back(r.tokens);
    }
    return out;
  }

  static std::string* dir_;
  int launches_ = 0;
};
std::string* ExpertsClusterTest::dir_ = nullptr;

TEST_F(ExpertsClusterTest, SameGreedyTokensAsEmbeddedForEveryPlacement) {
  const auto prompts = MakePrompts(6, 7, kVocab, 1);
  const auto want = Reference(Model("tiny"), prompts, 12);
  std::vector<Proc> workers = StartWorkers(Model("tiny"), {{"*:0-7"}, {"*:0-7"}, {"*:0-7"}});
  ASSERT_EQ(workers.size(), 3u);
  struct Case {
    std::vector<std::string> placement;
    int replicas;
  };
  const std::vector<Case> cases = {
      {{}, 1},                                          // round robin
      {{}, 3},                                          // every expert on every worker
      {{"*:0-3=0", "*:4-7=1,2", "0:0=2", "1:5=0"}, 1},  // mixed, some replicated
  };
  for (const Case& c : cases) {
    auto router = StartRouter(Model("tiny"), Addresses(workers), c.placement, c.replicas, *dir_);
    ASSERT_OK(router.status());
    const auto got = GenerateAll(router->address(), prompts, 12);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(got[i].finish_reason, rpb::FINISH_REASON_LENGTH) << got[i].error_message;
      EXPECT_EQ(got[i].tokens, want[i]) << "prompt " << i << " replicas " << c.replicas;
    }
  }
}

TEST_F(ExpertsClusterTest, KillingAWorkerWithReplicasLosesNoStream) {
  const auto prompts = MakePrompts(32, 5, kVocab, 2);
  const auto want = Reference(Model("tiny"), prompts, 24);
  std::vector<Proc> workers = StartWorkers(Model("tiny"), {{"*:0-7"}, {"*:0-7"}, {"*:0-7"}});
  ASSERT_EQ(workers.size(), 3u);
  auto router = StartRouter(Model("tiny"), Addresses(workers), {}, 2, *dir_);
  ASSERT_OK(router.status());
  std::atomic<int> messages{0};
  std::atomic<bool> killed{false};
  const auto got = GenerateAll(router->address(), prompts, 24, [&] {
    // Mid-stream: after ~4 tokens per stream, kill -9 worker 1.
    if (++messages == 32 * 4 && !killed.exchange(true)) workers[1].child->Signal(SIGKILL);
  });
  EXPECT_TRUE(killed.load());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].finish_reason, rpb::FINISH_REASON_LENGTH) << got[i].error_message;
    EXPECT_EQ(got[i].tokens, want[i]) << "stream " << i;
  }
}

TEST_F(ExpertsClusterTest, WithoutAReplicaOnlyAffectedSequencesFailAndTheRouterRecovers) {
  const auto prompts = MakePrompts(32, 2, kVocab, 3);
  const auto want = Reference(Model("skewed"), prompts, 2);
  const std::vector<int> ports = {common::testing::PickFreePort(), common::testing::PickFreePort(),
                                  common::testing::PickFreePort()};
  std::vector<Proc> workers =
      StartWorkers(Model("skewed"), {{"*:0-7"}, {"*:0-7"}, {"*:0-7"}}, ports);
  ASSERT_EQ(workers.size(), 3u);
  // Find the coldest expert of the skewed model on these prompts (all layers together).
  int cold = 0;
  {
    auto probe = StartRouter(Model("skewed"), Addresses(workers), {}, 3, *dir_);
    ASSERT_OK(probe.status());
    GenerateAll(probe->address(), prompts, 2);
    grpc::ClientContext ctx;
    rpb::GetStatsResponse stats;
    ASSERT_TRUE(RouterStub(probe->address())->GetStats(&ctx, {}, &stats).ok());
    std::vector<uint64_t> per_expert(8, 0);
    for (int i = 0; i < stats.expert_load().tokens_size(); ++i) {
      per_expert[i % 8] += stats.expert_load().tokens(i);
    }
    for (int e = 1; e < 8; ++e) {
      if (per_expert[e] < per_expert[cold]) cold = e;
    }
  }
  // The cold expert lives only on worker 2, which dies.
  std::vector<std::string> placement;
  for (int e = 0; e < 8; ++e) placement.push_back(absl::StrCat("*:", e, e == cold ? "=2" : "=0,1"));
  auto router = StartRouter(Model("skewed"), Addresses(workers), placement, 1, *dir_);
  ASSERT_OK(router.status());
  workers[2].child->Signal(SIGKILL);
  ASSERT_OK(workers[2].child->Wait(absl::Seconds(10)).status());

  const auto got = GenerateAll(router->address(), prompts, 2);
  int failed = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (got[i].finish_reason == rpb::FINISH_REASON_ERROR) {
      ++failed;
      EXPECT_NE(got[i].error_message.find(absl::StrCat("no live replica of expert ", cold)),
                std::string::npos)
          << got[i].error_message;
    } else {
      EXPECT_EQ(got[i].finish_reason, rpb::FINISH_REASON_LENGTH) << got[i].rpc_error;
      EXPECT_EQ(got[i].tokens, want[i]) << "stream " << i;
    }
  }
  EXPECT_GT(failed, 0) << "expert " << cold;
  EXPECT_LT(failed, 32) << "expert " << cold;

  // The worker comes back on its port: the router probes it healthy and every stream works.
  auto back = StartWorker(Model("skewed"), {"*:0-7"}, ports[2], *dir_ + "/worker2_back.log");
  ASSERT_OK(back.status());
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  std::vector<GenerateResult> again;
  bool all_ok = false;
  while (!all_ok && absl::Now() < deadline) {  // poll: the probe period is 100 ms
    again = GenerateAll(router->address(), prompts, 2);
    all_ok = true;
    for (const auto& r : again) all_ok = all_ok && r.finish_reason == rpb::FINISH_REASON_LENGTH;
  }
  ASSERT_TRUE(all_ok);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(again[i].tokens, want[i]) << i;
}

TEST_F(ExpertsClusterTest, LiveRecalibrationFailsNoRequest) {
  const auto prompts = MakePrompts(32, 4, kVocab, 4);
  const auto want = Reference(Model("skewed"), prompts, 32);
  // Round robin over 3 workers, each holding only its own experts.
  std::vector<Proc> workers =
      StartWorkers(Model("skewed"), {{"*:0", "*:3", "*:6"}, {"*:1", "*:4", "*:7"}, {"*:2", "*:5"}});
  ASSERT_EQ(workers.size(), 3u);
  auto router = StartRouter(Model("skewed"), Addresses(workers), {}, 1, *dir_);
  ASSERT_OK(router.status());
  // Load first, so the window has something to place.
  for (const auto& r : GenerateAll(router->address(), prompts, 4)) {
    ASSERT_EQ(r.finish_reason, rpb::FINISH_REASON_LENGTH);
  }
  std::atomic<int> messages{0};
  std::unique_ptr<testonly::ChildProcess> admin;
  std::string admin_out;
  std::thread admin_thread;
  const auto got = GenerateAll(router->address(), prompts, 32, [&] {
    if (++messages != 32 * 3) return;
    admin_thread = std::thread([&] {
      const char* bdir = std::getenv("MOE_BUILD_DIR");
      auto child = testonly::ChildProcess::Spawn(
          {absl::StrCat(bdir, "/bin/moe"), "admin", "calibrate-router", "--routers",
           router->address(), "--window", "300s"},
          *dir_ + "/admin.log");
      ASSERT_OK(child.status());
      auto line = child->ReadLine(absl::Seconds(30));
      ASSERT_OK(line.status()) << child->Stderr();
      admin_out = *line;
      EXPECT_EQ(*child->Wait(absl::Seconds(10)), 0);
    });
  });
  if (admin_thread.joinable()) admin_thread.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i].finish_reason, rpb::FINISH_REASON_LENGTH) << got[i].error_message;
    EXPECT_EQ(got[i].tokens, want[i]) << "stream " << i;
  }
  ASSERT_FALSE(admin_out.empty());
  const nlohmann::json report = nlohmann::json::parse(admin_out);
  EXPECT_EQ(report["version"], 1);
  EXPECT_GT(report["experts_loaded"].get<int>(), 0);
  for (int l = 0; l < 2; ++l) {
    EXPECT_GT(report["balancedness_after"][l].get<double>(),
              report["balancedness_before"][l].get<double>())
        << report.dump();
  }
  auto stats = RouterStub(router->address());
  grpc::ClientContext ctx;
  rpb::GetStatsRequest req;
  rpb::GetStatsResponse resp;
  ASSERT_TRUE(stats->GetStats(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.placement_version(), 1u);
}

}  // namespace
}  // namespace moe::testing
