// Placement-aware autoscaling end to end, driven by a real Prometheus (Debian's `prometheus`):
// the in-test API server, the kubelet stand-in running the chart's pods as local processes
// (router, gateway, expert workers of the generated `small` preset), Prometheus scraping them
// with deploy/monitoring/prometheus.yaml's relabelling (kubernetes_sd replaced by the stand-in's
// file_sd), and the `operator` process. A load of concurrent greedy streams raises the expert
// workers' utilisation:
//   - the operator scales the pool 1 -> 2 (ExpertPool spec), the new worker starts, and only once
//     it is ready the placement is switched onto it (load, SetPlacement, drain): then it counts;
//   - a RouterCalibration recalibrates the routers from the measured load (status before/after);
//   - the load stops: the operator scales 2 -> 1, places away from the leaving worker first, and
//     only then the StatefulSet shrinks and the pod goes;
// with no failed request and every stream's tokens equal to the ones before any scaling.
// About 30-40 s here (label integration).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/http/http_client.h"
#include "common/process/child_process.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/core/topology.h"
#include "services/operator/testing/local_kubelet.h"
#include "services/operator/testing/operator_harness.h"
#include "services/router/grpc_recalibration_transport.h"
#include "tests/integration/experts_cluster.h"
#include "yaml-cpp/yaml.h"

namespace moe::op {
namespace {

using testing::LocalKubelet;
using testing::OperatorHarness;
using testing::OperatorProcess;
using Json = nlohmann::json;

const kube::Resource kClusters{"moe-cluster.io/v1alpha1", "moeclusters", true};
const kube::Resource kCalibrations{"moe-cluster.io/v1alpha1", "routercalibrations", true};

// A port free on every address (so free on each pod's loopback address too).
int FreeWildcardPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = INADDR_ANY;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// deploy/monitoring/prometheus.yaml with the stand-in's file_sd for kubernetes_sd, 1 s scrapes.
std::string PrometheusConfig(const std::string& file_sd) {
  YAML::Node cfg = YAML::LoadFile(testing::SourceDir() + "/deploy/monitoring/prometheus.yaml");
  cfg["global"]["scrape_interval"] = "1s";
  cfg["global"]["evaluation_interval"] = "1s";
  cfg.remove("rule_files");
  YAML::Node job = cfg["scrape_configs"][0];
  job.remove("kubernetes_sd_configs");
  YAML::Node sd;
  sd["files"].push_back(file_sd);
  sd["refresh_interval"] = "1s";
  job["file_sd_configs"].push_back(sd);
  YAML::Emitter out;
  out << cfg;
  return out.c_str();
}

class AutoscalingTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (op_.child) {
      op_.child->Signal(SIGTERM);
      (void)op_.child->Wait(absl::Seconds(20));
    }
    if (kubelet_) kubelet_->Stop();
    if (prometheus_) prometheus_->Stop(absl::Seconds(5));
  }

  std::optional<Json> Get(const char* plural, const std::string& name) {
    return h_->server().Get(plural, "moe", name);
  }
  std::string Events() {
    std::vector<std::string> out;
    for (const Json& e : h_->server().List("events", "moe")) {
      out.push_back(absl::StrCat(e["involvedObject"].value("name", ""), " ", e.value("reason", ""),
                                 ": ", e.value("message", "")));
    }
    return absl::StrJoin(out, "\n");
  }
  std::string Diagnostics() {
    std::string s = "--- events:\n" + Events() + "\n--- operator:\n" + op_.child->Stderr();
    for (const auto& p : kubelet_->Pods()) {
      absl::StrAppend(&s, "\n--- pod ", p.name, " ", p.ip, p.ready ? " ready" : " not ready");
    }
    return s;
  }
  // The routers' placement workers, as GetStats reports them.
  std::vector<int32_t> PlacedWorkers() {
    router::GrpcRecalibrationTransport t({router_address_}, {.timeout = absl::Seconds(5)});
    if (!t.Connect().ok()) return {};
    auto r = t.GetStats(0, absl::Seconds(5));
    if (!r.ok()) return {};
    std::vector<int32_t> ids;
    for (const auto& w : r->placement.workers) ids.push_back(w.worker_id);
    return ids;
  }

  std::unique_ptr<OperatorHarness> h_;
  std::unique_ptr<LocalKubelet> kubelet_;
  std::unique_ptr<common::process::ChildProcess> prometheus_;
  OperatorProcess op_;
  std::string router_address_;
};

TEST_F(AutoscalingTest, LoadScalesTheExpertPoolAndRecalibratesWithoutFailuresOrTokenChanges) {
  if (!testing::HelmBinary().has_value()) GTEST_SKIP() << "no helm: run scripts/setup";
  if (::access("/usr/bin/prometheus", X_OK) != 0) GTEST_SKIP() << "no prometheus";
  ASSERT_OK_AND_ASSIGN(h_, OperatorHarness::Create("moe"));
  const std::string dir = h_->dir();
  const std::string model = dir + "/small";
  ASSERT_OK_AND_ASSIGN(auto made, common::process::RunToExit(
                                      {.argv = {testing::BuildDir() + "/bin/moe", "make-model",
                                                "--preset", "small", "--out", model}},
                                      absl::Minutes(2)));
  ASSERT_EQ(made.exit_code, 0);

  // The chart's ports, free on every address; quiet logs; fast health probes of workers.
  const int router_port = FreeWildcardPort(), expert_port = FreeWildcardPort();
  const int metrics_port = FreeWildcardPort(), gateway_port = FreeWildcardPort();
  std::ofstream(dir + "/values.yaml")
      << "ports: {routerGrpc: " << router_port << ", expertGrpc: " << expert_port
      << ", metrics: " << metrics_port << "}\n"
      << "logLevel: warn\n"
      << "routers:\n  config:\n    experts: {probe_interval: 100ms}\n"
      << "    grpc: {drain_timeout: 5s}\n";

  // Prometheus, scraping what the stand-in runs.
  const std::string file_sd = dir + "/targets.json";
  std::ofstream(file_sd) << "[]";
  std::ofstream(dir + "/prometheus.yaml") << PrometheusConfig(file_sd);
  const int prom_port = common::testing::PickFreePort();
  ASSERT_OK_AND_ASSIGN(
      prometheus_,
      common::process::ChildProcess::Spawn(
          {.argv = {"/usr/bin/prometheus", "--config.file=" + dir + "/prometheus.yaml",
                    "--storage.tsdb.path=" + dir + "/tsdb",
                    absl::StrCat("--web.listen-address=127.0.0.1:", prom_port), "--log.level=warn"},
           .stderr_path = dir + "/prometheus.log"}));
  prometheus_->DrainStdout();
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] {
        auto r =
            common::http::HttpCall("127.0.0.1", prom_port, "GET", "/-/ready", absl::Seconds(1));
        return r.has_value() && r->status == 200;
      },
      absl::Seconds(20)));

  kubelet_ = std::make_unique<LocalKubelet>(
      testing::LocalKubeletOptions{
          .ns = "moe",
          .bin_dir = testing::BuildDir() + "/bin",
          .work_dir = dir + "/pods",
          .file_sd = file_sd,
          .env = {"MOE_KERNELS_ISA=" + std::string(std::getenv("MOE_KERNELS_ISA")
                                                       ? std::getenv("MOE_KERNELS_ISA")
                                                       : "auto")}},
      h_->client());
  kubelet_->Start();

  Json cluster = {
      {"apiVersion", "moe-cluster.io/v1alpha1"},
      {"kind", "MoECluster"},
      {"metadata", {{"name", "c"}}},
      {"spec",
       {{"model", {{"name", "small"}, {"source", {{"hostPath", {{"path", model}}}}}}},
        {"gateway", {{"replicas", 1}, {"port", gateway_port}}},
        {"routers", {{"replicas", 1}, {"numThreads", 1}, {"kvCacheBytes", "64Mi"}}},
        {"expertPools",
         {{{"name", "all"},
           {"replicas", 1},
           {"experts", {"*:0-7"}},
           {"autoscaling", {{"minReplicas", 1}, {"maxReplicas", 2}}}}}},
        {"autoscaling", {{"enabled", true}, {"targets", {{"expertUtilisation", 0.15}}}}},
        {"recalibration", {{"mode", "OnDemand"}}}}}};
  ASSERT_OK(h_->client().Create(kClusters, "moe", cluster).status());
  ASSERT_OK_AND_ASSIGN(
      op_, h_->StartOperator(
               "op", {"leader_election=false", "address_mode=pod_ip",
                      absl::StrCat("prometheus=http://127.0.0.1:", prom_port),
                      "chart_values=" + dir + "/values.yaml", "pool_interval=500ms", "resync=2s",
                      "stats_window=10s", "rpc_timeout=20s", "scale_up_stabilization=2s",
                      "scale_down_stabilization=4s", "scale_cooldown=4s", "max_scale_up_step=1"}));

  // The cluster comes up: Ready, one worker placed.
  auto condition = [&](const char* type) -> std::string {
    auto c = Get("moeclusters", "c");
    if (!c || !c->contains("status")) return "";
    for (const Json& x : (*c)["status"].value("conditions", Json::array())) {
      if (x.value("type", "") == type) return x.value("status", "") + "/" + x.value("reason", "");
    }
    return "";
  };
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] { return condition("Ready") == "True/AllReplicasReady"; }, absl::Seconds(90)))
      << condition("Ready") << "\n"
      << Diagnostics();
  router_address_ = absl::StrCat(kubelet_->IpOf("c-router-0"), ":", router_port);
  EXPECT_EQ(PlacedWorkers(), std::vector<int32_t>{0});

  // Baseline tokens, before any scaling.
  const auto prompts = moe::testing::MakePrompts(8, 12, 1024, 7);
  const int kMaxTokens = 24;
  std::vector<std::vector<int32_t>> baseline;
  {
    auto stub = moe::testing::RouterStub(router_address_);
    for (const auto& p : prompts) {
      auto r = moe::testing::Generate(*stub, p, kMaxTokens);
      ASSERT_TRUE(r.rpc_error.empty() && r.error_message.empty()) << r.rpc_error << r.error_message;
      baseline.push_back(r.tokens);
    }
  }
  // The gateway serves too (the whole chain: HTTP -> gateway -> router -> workers).
  {
    auto r = common::http::HttpCall(kubelet_->IpOf("c-gateway-0"), gateway_port, "GET", "/readyz",
                                    absl::Seconds(5));
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 200);
  }

  // The load: concurrent greedy streams over the same prompts, until told to stop.
  std::atomic<bool> stop{false};
  std::atomic<int> completed{0}, failed{0}, mismatched{0};
  std::mutex mu;
  std::vector<std::string> failures;
  std::vector<std::thread> load;
  for (int t = 0; t < 12; ++t) {
    load.emplace_back([&, t] {
      auto stub = moe::testing::RouterStub(router_address_);
      for (size_t i = t % prompts.size(); !stop; i = (i + 1) % prompts.size()) {
        auto r = moe::testing::Generate(*stub, prompts[i], kMaxTokens);
        if (!r.rpc_error.empty() || !r.error_message.empty()) {
          ++failed;
          std::lock_guard<std::mutex> lock(mu);
          failures.push_back(r.rpc_error + r.error_message);
        } else if (r.tokens != baseline[i]) {
          ++mismatched;
        } else {
          ++completed;
        }
      }
    });
  }
  auto stop_load = [&] {
    stop = true;
    for (auto& th : load) th.join();
    load.clear();
  };
  // Whatever assertion ends the test, the streams are stopped and joined first.
  struct Joiner {
    std::function<void()> f;
    ~Joiner() { f(); }
  } joiner{stop_load};

  // Scale up: the autoscaler asks for 2; the worker starts; placed only once ready; counted.
  auto pool_replicas = [&] {
    auto p = Get("expertpools", "c-all");
    return p ? (*p)["spec"].value("replicas", 0) : 0;
  };
  auto pool_ready = [&] {
    auto p = Get("expertpools", "c-all");
    return p && p->contains("status") ? (*p)["status"].value("readyReplicas", 0) : 0;
  };
  ASSERT_TRUE(OperatorHarness::WaitFor([&] { return pool_replicas() == 2; }, absl::Seconds(60)))
      << Diagnostics();
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] { return PlacedWorkers().size() == 2 && pool_ready() == 2; }, absl::Seconds(60)))
      << Diagnostics();
  EXPECT_EQ(PlacedWorkers(), (std::vector<int32_t>{0, kExtraWorkerIdBase + 1}));
  EXPECT_TRUE(absl::StrContains(Events(), "ScalingUp: expert pool all: 1 -> 2")) << Events();
  EXPECT_TRUE(absl::StrContains(Events(), "PlacementChanged")) << Events();
  const int64_t version_after_scale_up =
      (*Get("moeclusters", "c"))["status"].value("placementVersion", 0);
  EXPECT_GE(version_after_scale_up, 1);

  // A recalibration from the measured load, still under load.
  ASSERT_OK(
      h_->client()
          .Create(
              kCalibrations, "moe",
              {{"apiVersion", "moe-cluster.io/v1alpha1"},
               {"kind", "RouterCalibration"},
               {"metadata", {{"name", "now"}}},
               {"spec",
                {{"cluster", "c"}, {"window", "5s"}, {"drainTimeout", "10s"}, {"timeout", "60s"}}}})
          .status());
  auto phase = [&] {
    auto rc = Get("routercalibrations", "now");
    return rc && rc->contains("status") ? (*rc)["status"].value("phase", "") : "";
  };
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] { return phase() == "Succeeded" || phase() == "Failed"; }, absl::Seconds(60)))
      << Diagnostics();
  const Json rc = (*Get("routercalibrations", "now"))["status"];
  EXPECT_EQ(rc["phase"], "Succeeded") << rc.dump();
  EXPECT_EQ(rc["before"]["placementVersion"], version_after_scale_up);
  EXPECT_EQ(rc["after"]["placementVersion"], version_after_scale_up + 1);
  EXPECT_GT(rc["before"]["windowTokens"].get<int64_t>(), 0);

  // The load stops: the pool goes back to 1, placed away before the worker is removed.
  absl::SleepFor(absl::Seconds(1));
  stop_load();
  ASSERT_TRUE(OperatorHarness::WaitFor([&] { return pool_replicas() == 1; }, absl::Seconds(60)))
      << Diagnostics();
  ASSERT_TRUE(OperatorHarness::WaitFor(
      [&] {
        auto sts = Get("statefulsets", "c-experts-all");
        return PlacedWorkers() == std::vector<int32_t>{0} && sts &&
               (*sts)["spec"].value("replicas", 0) == 1 &&
               !Get("pods", "c-experts-all-1").has_value();
      },
      absl::Seconds(60)))
      << Diagnostics();
  EXPECT_TRUE(absl::StrContains(Events(), "ScalingDown: expert pool all: 2 -> 1")) << Events();
  // One decision each way, read before the token check below: those 8 requests are load
  // again (utilisation ~0.2 over a 0.15 target), and a slow machine lets the stabilisation
  // window and the cooldown pass while they run, so the pool may rightly scale up once more.
  auto metrics = common::http::HttpCall(op_.metrics_port, "GET", "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_TRUE(
      absl::StrContains(metrics->body, "moe_operator_scale_decisions_total{direction=\"up\"} 1"))
      << metrics->body << Diagnostics();
  EXPECT_TRUE(
      absl::StrContains(metrics->body, "moe_operator_scale_decisions_total{direction=\"down\"} 1"))
      << Diagnostics();

  // Nothing failed, nothing changed.
  EXPECT_EQ(failed.load(), 0) << absl::StrJoin(failures, "\n");
  EXPECT_EQ(mismatched.load(), 0);
  // Streams ran through both transitions (a sanitizer build, MOE_SANITIZED, runs them slower:
  // 48 completed under ASan on 2 cores, 192 in the GCC build, loaded).
  EXPECT_GT(completed.load(), std::getenv("MOE_SANITIZED") != nullptr ? 20 : 50);
  auto stub = moe::testing::RouterStub(router_address_);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto r = moe::testing::Generate(*stub, prompts[i], kMaxTokens);
    EXPECT_EQ(r.tokens, baseline[i]) << i;
  }
  EXPECT_EQ(h_->Forbidden(), std::vector<std::string>{}) << "the chart's Role lacks these";
  std::printf("autoscaling: %d streams completed, %d failed; events:\n%s\n", completed.load(),
              failed.load(), Events().c_str());
}

}  // namespace
}  // namespace moe::op
