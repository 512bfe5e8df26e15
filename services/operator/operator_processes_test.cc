// Two `operator` processes against the in-test API server: exactly one (the Lease holder)
// writes; when it dies the other takes the Lease once it expires and carries on (a deleted child
// comes back, written by the new leader only); SIGTERM releases the Lease and exits 0; both
// serve a /metrics that `promtool check metrics` accepts.
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/http/http_client.h"
#include "common/process/child_process.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/testing/operator_harness.h"

namespace moe::op {
namespace {

using testing::OperatorHarness;
using testing::OperatorProcess;

const kube::Resource kClusters{"moe-cluster.io/v1alpha1", "moeclusters", true};
const kube::Resource kDeployments{"apps/v1", "deployments", true};

const char kCluster[] = R"({
  "apiVersion": "moe-cluster.io/v1alpha1", "kind": "MoECluster",
  "metadata": {"name": "c1"},
  "spec": {"model": {"name": "tiny", "source": {"hostPath": {"path": "/models/tiny"}}},
           "expertPools": [{"name": "all", "replicas": 1, "experts": ["*:0-7"]}]}})";

// Who wrote (method not GET) anything but the Lease and events, since request `from`.
std::set<std::string> Writers(const testing::FakeApiServer& s, size_t from) {
  std::set<std::string> out;
  const auto reqs = s.Requests();
  for (size_t i = from; i < reqs.size(); ++i) {
    const auto& r = reqs[i];
    if (r.method == "GET" || absl::StrContains(r.path, "/leases") ||
        absl::StrContains(r.path, "/events") || r.user_agent == "kubectl") {
      continue;
    }
    out.insert(r.user_agent);
  }
  return out;
}

std::string Holder(const testing::FakeApiServer& s) {
  auto l = s.Get("leases", "moe", "moe-operator");
  return l ? (*l)["spec"].value("holderIdentity", "") : "";
}

std::string Metrics(const OperatorProcess& p) {
  auto r = common::http::HttpCall(p.metrics_port, "GET", "/metrics");
  return r.has_value() ? r->body : "";
}

TEST(OperatorProcessesTest, OnlyTheLeaderActsAndTheOtherTakesOver) {
  if (!testing::HelmBinary().has_value()) GTEST_SKIP() << "no helm: run scripts/setup";
  ASSERT_OK_AND_ASSIGN(auto h, OperatorHarness::Create("moe"));
  ASSERT_OK(h->client().Create(kClusters, "moe", nlohmann::json::parse(kCluster)).status());
  const std::vector<std::string> fast = {"lease_duration=2s", "renew_deadline=1500ms",
                                         "retry_period=200ms", "resync=2s", "address_mode=pod_ip"};
  ASSERT_OK_AND_ASSIGN(OperatorProcess a, h->StartOperator("op-a", fast));
  ASSERT_OK_AND_ASSIGN(OperatorProcess b, h->StartOperator("op-b", fast));

  // The chart's objects appear, all written by the one holding the Lease.
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] {
        return h->server().Get("configmaps", "moe", "c1-config").has_value() &&
               h->server().Get("deployments", "moe", "c1-gateway").has_value();
      },
      absl::Seconds(30)))
      << a.child->Stderr() << b.child->Stderr();
  const std::string leader = Holder(h->server());
  ASSERT_TRUE(leader == "op-a" || leader == "op-b") << leader;
  OperatorProcess& lead = leader == "op-a" ? a : b;
  OperatorProcess& standby = leader == "op-a" ? b : a;
  EXPECT_EQ(Writers(h->server(), 0), std::set<std::string>{"moe-operator/" + leader});
  auto cluster = h->server().Get("moeclusters", "moe", "c1");
  ASSERT_TRUE(cluster.has_value());
  EXPECT_EQ((*cluster)["metadata"]["finalizers"][0], "moe-cluster.io/cleanup");
  EXPECT_TRUE(OperatorHarness::WaitFor(
      [&] { return h->server().Get("moeclusters", "moe", "c1")->contains("status"); },
      absl::Seconds(10)));
  EXPECT_TRUE(absl::StrContains(Metrics(lead), "moe_operator_leader 1"));
  EXPECT_TRUE(absl::StrContains(Metrics(standby), "moe_operator_leader 0"));

  // promtool accepts both /metrics.
  if (::access("/usr/bin/promtool", X_OK) == 0) {
    for (const OperatorProcess* p : {&lead, &standby}) {
      const std::string file = absl::StrCat(h->dir(), "/", p->identity, ".prom");
      std::ofstream(file) << Metrics(*p);
      auto r = common::process::RunToExit(
          {.argv = {"/bin/sh", "-c", "promtool check metrics < " + file + " 2>&1"}},
          absl::Seconds(20));
      ASSERT_OK(r.status());
      EXPECT_EQ(r->exit_code, 0) << r->stdout_text;
    }
  }

  // The leader dies without releasing the Lease. A child is deleted meanwhile. (The mark is
  // taken once it is dead: until then it leads, and may be writing.)
  const absl::Time killed = absl::Now();
  lead.child->Signal(SIGKILL);
  ASSERT_OK(lead.child->Wait(absl::Seconds(5)).status());
  const size_t mark = h->server().Requests().size();
  ASSERT_OK(h->client().Delete(kDeployments, "moe", "c1-gateway"));
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] { return h->server().Get("deployments", "moe", "c1-gateway").has_value(); },
      absl::Seconds(20)))
      << standby.child->Stderr();
  EXPECT_GE(absl::Now() - killed, absl::Milliseconds(1500));  // not before the Lease expired
  EXPECT_EQ(Holder(h->server()), standby.identity);
  EXPECT_EQ(Writers(h->server(), mark), std::set<std::string>{"moe-operator/" + standby.identity});

  // SIGTERM: the Lease is released and the process exits 0.
  standby.child->Signal(SIGTERM);
  ASSERT_OK_AND_ASSIGN(int code, standby.child->Wait(absl::Seconds(20)));
  EXPECT_EQ(code, 0) << standby.child->Stderr();
  EXPECT_EQ(Holder(h->server()), "");
  EXPECT_EQ(h->Forbidden(), std::vector<std::string>{}) << "the chart's Role lacks these";
}

TEST(OperatorProcessesTest, DeletingTheClusterCleansUpAndRemovesTheFinalizer) {
  if (!testing::HelmBinary().has_value()) GTEST_SKIP() << "no helm: run scripts/setup";
  ASSERT_OK_AND_ASSIGN(auto h, OperatorHarness::Create("moe"));
  ASSERT_OK(h->client().Create(kClusters, "moe", nlohmann::json::parse(kCluster)).status());
  ASSERT_OK_AND_ASSIGN(OperatorProcess a,
                       h->StartOperator("op-a", {"leader_election=false", "address_mode=pod_ip"}));
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] {
        return h->server().Get("statefulsets", "moe", "c1-router").has_value() &&
               h->server().Get("expertpools", "moe", "c1-all").has_value();
      },
      absl::Seconds(30)))
      << a.child->Stderr();
  ASSERT_OK(h->client().Delete(kClusters, "moe", "c1"));
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] { return !h->server().Get("moeclusters", "moe", "c1").has_value(); }, absl::Seconds(20)))
      << a.child->Stderr();
  EXPECT_TRUE(h->server().List("statefulsets", "moe").empty());
  EXPECT_TRUE(h->server().List("configmaps", "moe").empty());
  EXPECT_TRUE(h->server().List("expertpools", "moe").empty());
  a.child->Signal(SIGTERM);
  EXPECT_OK(a.child->Wait(absl::Seconds(20)).status());
  EXPECT_EQ(h->Forbidden(), std::vector<std::string>{}) << "the chart's Role lacks these";
}

}  // namespace
}  // namespace moe::op
