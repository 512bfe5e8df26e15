// `moe up`'s topology table and options, without starting anything.
#include "tools/moe/up_topology.h"

#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/config/loader.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::cli {
namespace {

using ::moe::common::testing::StatusIs;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(UpTopologyTest, StartOrderIsBackEndsFirst) {
  std::vector<std::string> names;
  for (const ServiceSpec& s : Topology()) names.push_back(s.name);
  EXPECT_THAT(names, ElementsAre("expert_worker", "kv_store", "router", "asr", "tts", "gateway"));
}

TEST(UpTopologyTest, EverySpecIsAConfigSection) {
  const std::string keys = common::config::DescribeKeys<UpOptions>();
  for (const ServiceSpec& s : Topology()) {
    EXPECT_THAT(keys, HasSubstr(s.name + ".replicas")) << keys;
    EXPECT_THAT(keys, HasSubstr(s.name + ".args"));
  }
}

TEST(UpTopologyTest, ReplicaBoundsComeFromTheSpecs) {
  UpOptions o;
  EXPECT_OK(o.Validate());
  o.router.replicas = 0;
  EXPECT_THAT(o.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, "router.replicas: at least 1"));
  o = UpOptions{};
  o.gateway.replicas = 2;
  EXPECT_THAT(o.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, "gateway.replicas: must be 1"));
}

TEST(UpTopologyTest, OneKvStoreByDefaultWithItsL3InTheDataDirectory) {
  EXPECT_EQ(UpOptions{}.kv_store.replicas, 1);
  UpContext c;
  c.data_dir = "/data";
  EXPECT_THAT(ServiceNamed("kv_store").flags(c, 1), Contains("core.l3_dir=/data/kv-store-1"));
}

TEST(UpTopologyTest, RoutersAreToldAboutStartedWorkersAndTheGatewayAboutRouters) {
  UpContext c;
  c.model_dir = "/m";
  c.num_experts = 8;
  EXPECT_THAT(ServiceNamed("expert_worker").flags(c, 0), Contains("core.experts=*:0-7"));
  // Without workers, the router runs its experts itself.
  const std::string embedded = absl::StrJoin(ServiceNamed("router").flags(c, 1), " ");
  EXPECT_THAT(embedded, HasSubstr("router_id=router-1"));
  EXPECT_THAT(embedded, Not(HasSubstr("experts.workers")));

  c.started.push_back({"expert_worker", {.grpc = 5001, .metrics = 5002}});
  c.started.push_back({"expert_worker", {.grpc = 5003, .metrics = 5004}});
  EXPECT_THAT(ServiceNamed("router").flags(c, 0),
              Contains("experts.workers=127.0.0.1:5001,127.0.0.1:5003"));
  EXPECT_THAT(absl::StrJoin(ServiceNamed("router").flags(c, 0), " "),
              Not(HasSubstr("kv_store.targets")));
  c.started.push_back({"kv_store", {.grpc = 7001, .metrics = 7002}});
  EXPECT_THAT(ServiceNamed("router").flags(c, 0), Contains("kv_store.targets=127.0.0.1:7001"));
  c.started.push_back({"router", {.grpc = 6001}});
  c.started.push_back({"router", {.grpc = 6002}});
  const std::vector<std::string> gateway = ServiceNamed("gateway").flags(c, 0);
  EXPECT_THAT(gateway, Contains("routing.routers=127.0.0.1:6001,127.0.0.1:6002"));
  EXPECT_THAT(gateway, Contains("http.port=8000"));
  EXPECT_THAT(gateway, Contains("model_dir=/m"));
  // Without speech services the gateway gets empty voice targets (its voice endpoints: 503).
  EXPECT_THAT(gateway, Contains("voice.asr="));
}

// numerics.* reaches every router and expert worker (they refuse each other otherwise).
TEST(UpTopologyTest, NumericsGoToEveryRouterAndWorker) {
  UpContext c;
  c.model_dir = "/m";
  for (const char* kind : {"router", "expert_worker"}) {
    EXPECT_THAT(ServiceNamed(kind).flags(c, 0), Contains("core.weights=checkpoint")) << kind;
    EXPECT_THAT(ServiceNamed(kind).flags(c, 0), Contains("core.activations=f32")) << kind;
  }
  UpOptions o;
  o.numerics.weights = "q8_0";
  o.numerics.activations = "bf16";
  EXPECT_OK(o.Validate());
  c.options = o;
  for (const char* kind : {"router", "expert_worker"}) {
    EXPECT_THAT(ServiceNamed(kind).flags(c, 0), Contains("core.weights=q8_0")) << kind;
    EXPECT_THAT(ServiceNamed(kind).flags(c, 0), Contains("core.activations=bf16")) << kind;
  }
  o.numerics.weights = "int4";
  EXPECT_THAT(o.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("numerics.weights")));
}

TEST(UpTopologyTest, TheGatewayIsToldAboutTheSpeechServices) {
  UpContext c;
  c.model_dir = "/m";
  EXPECT_EQ(UpOptions{}.asr.replicas, 1);
  EXPECT_EQ(UpOptions{}.tts.replicas, 1);
  EXPECT_THAT(ServiceNamed("asr").flags(c, 0), Contains("grpc.port=0"));
  c.started.push_back({"router", {.grpc = 6001}});
  c.started.push_back({"asr", {.grpc = 7001, .metrics = 7002}});
  c.started.push_back({"tts", {.grpc = 7003, .metrics = 7004}});
  const std::vector<std::string> gateway = ServiceNamed("gateway").flags(c, 0);
  EXPECT_THAT(gateway, Contains("voice.asr=127.0.0.1:7001"));
  EXPECT_THAT(gateway, Contains("voice.tts=127.0.0.1:7003"));
}

TEST(UpTopologyTest, ComputeThreadsNeverOversubscribeTheHost) {
  UpContext c;
  c.model_dir = "/m";
  c.num_experts = 8;
  // The default: 1 router, 2 workers taking turns with it on every core.
  for (const auto& [cores, router, worker] :
       std::vector<std::tuple<int, int, int>>{{1, 1, 1}, {2, 2, 1}, {4, 4, 2}, {16, 16, 8}}) {
    c.host_cores = cores;
    const ThreadPlan plan = PlanThreads(c);
    EXPECT_EQ(plan.router_threads, router) << cores;
    EXPECT_EQ(plan.worker_threads, worker) << cores;
  }
  c.host_cores = 16;
  c.options.router.replicas = 2;
  c.options.expert_worker.replicas = 4;
  EXPECT_EQ(PlanThreads(c).router_threads, 8);
  EXPECT_EQ(PlanThreads(c).worker_threads, 4);
  EXPECT_THAT(ServiceNamed("expert_worker").flags(c, 0), Contains("core.threads_per_call=4"));
  c.started.push_back({"expert_worker", {.grpc = 5001, .metrics = 5002}});
  const std::vector<std::string> router = ServiceNamed("router").flags(c, 0);
  EXPECT_THAT(router, Contains("core.num_threads=8"));
  EXPECT_THAT(router, Contains("core.micro_batches=1"));
}

TEST(UpTopologyTest, DefaultsToTwoExpertWorkers) {
  EXPECT_EQ(UpOptions().expert_worker.replicas, 2);
}

}  // namespace
}  // namespace moe::cli
