#include "services/operator/core/chart_values.h"

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::op {
namespace {

using common::testing::StatusIs;

// deploy/crds/examples/laptop-cpu.yaml, plus autoscaling of the routers and pool `hi`.
const Json kLaptop = R"({
  "metadata": {"name": "laptop", "namespace": "moe", "uid": "u1"},
  "spec": {
    "model": {"name": "small", "source": {"preset": {"name": "small"}}},
    "numerics": {"device": "cpu"},
    "gateway": {"replicas": 1, "resources": {"requests": {"cpu": "100m"}}},
    "routers": {"replicas": 2, "numThreads": 1, "kvCacheBytes": "64Mi"},
    "expertPools": [
      {"name": "lo", "replicas": 1, "experts": ["*:0-3"]},
      {"name": "hi", "replicas": 3, "experts": ["*:4-7"],
       "autoscaling": {"minReplicas": 1, "maxReplicas": 4}}],
    "autoscaling": {"enabled": true, "targets": {"queueDepth": 8, "ttftP99": "1500ms"},
                    "routers": {"minReplicas": 2, "maxReplicas": 6}}
  }})"_json;

TEST(ChartValuesTest, MapsTheClusterOntoTheChartsValues) {
  ASSERT_OK_AND_ASSIGN(ClusterSpec c, ParseCluster(kLaptop));
  ASSERT_OK_AND_ASSIGN(Json v, ChartValues(c, c.pools, Json::object()));
  EXPECT_EQ(v["fullnameOverride"], "laptop");
  EXPECT_EQ(v["operator"]["enabled"], false);
  EXPECT_EQ(v["model"], R"({"name": "small", "maxModelLen": 0, "source": "preset",
    "preset": {"name": "small", "arch": "mixtral", "dtype": "bf16"}})"_json);
  EXPECT_EQ(v["routers"]["replicas"], 2);
  EXPECT_EQ(v["routers"]["config"]["core"]["kv_cache_bytes"], 67108864);
  EXPECT_EQ(v["routers"]["config"]["core"]["num_threads"], 1);
  EXPECT_EQ(v["routers"]["autoscaling"], R"({"enabled": true, "minReplicas": 2,
    "maxReplicas": 6, "targetQueueDepth": 8, "targetTtftP99Seconds": 1.5})"_json);
  EXPECT_EQ(v["gateway"]["autoscaling"], R"({"enabled": false})"_json);
  EXPECT_EQ(v["gateway"]["resources"], R"({"requests": {"cpu": "100m"}})"_json);
  // Pools at their floor: the routers' config names one worker each, whatever the replicas.
  ASSERT_EQ(v["expertPools"].size(), 2u);
  EXPECT_EQ(v["expertPools"][0]["name"], "lo");
  EXPECT_EQ(v["expertPools"][0]["replicas"], 1);
  EXPECT_EQ(v["expertPools"][1]["replicas"], 1);
  EXPECT_EQ(v["expertPools"][1]["experts"], R"(["*:4-7"])"_json);
  EXPECT_EQ(v["placement"]["policy"], "pools");
  EXPECT_EQ(v["monitoring"]["podMonitor"]["enabled"], false);
  // Once per namespace, from the operator's release, not once per cluster.
  EXPECT_EQ(v["monitoring"]["rulesConfigMap"]["enabled"], false);
  EXPECT_EQ(v["monitoring"]["dashboards"]["enabled"], false);
  EXPECT_EQ(v["monitoring"]["prometheusAdapter"]["rulesConfigMap"], false);
}

TEST(ChartValuesTest, BaseValuesSitUnderTheClusters) {
  ASSERT_OK_AND_ASSIGN(ClusterSpec c, ParseCluster(kLaptop));
  const Json base = R"({"ports": {"routerGrpc": 41000, "gatewayHttp": 1},
                        "networkPolicy": {"enabled": false},
                        "routers": {"replicas": 9, "config": {"grpc": {"drain_timeout": "5s"}}}})"_json;
  ASSERT_OK_AND_ASSIGN(Json v, ChartValues(c, c.pools, base));
  EXPECT_EQ(v["ports"]["routerGrpc"], 41000);
  EXPECT_EQ(v["ports"]["gatewayHttp"], 8000);  // the cluster's gateway.port default wins
  EXPECT_EQ(v["networkPolicy"]["enabled"], false);
  EXPECT_EQ(v["routers"]["replicas"], 2);
  EXPECT_EQ(v["routers"]["config"]["grpc"]["drain_timeout"], "5s");
  EXPECT_EQ(v["routers"]["config"]["core"]["num_threads"], 1);
  // The namespace-wide monitoring objects come back when the base asks for them.
  ASSERT_OK_AND_ASSIGN(
      Json m,
      ChartValues(c, c.pools, R"({"monitoring": {"rulesConfigMap": {"enabled": true}}})"_json));
  EXPECT_EQ(m["monitoring"]["rulesConfigMap"]["enabled"], true);
  EXPECT_EQ(m["monitoring"]["dashboards"]["enabled"], false);
}

TEST(ChartValuesTest, SourcesAndStaticPlacement) {
  Json o = kLaptop;
  o["spec"]["model"]["source"] = R"({"hostPath": {"path": "/data/m"}})"_json;
  o["spec"]["placement"] = R"({"policy": "Static", "table": ["*:0-7=0"]})"_json;
  ASSERT_OK_AND_ASSIGN(ClusterSpec c, ParseCluster(o));
  ASSERT_OK_AND_ASSIGN(Json v, ChartValues(c, c.pools, Json::object()));
  EXPECT_EQ(v["model"]["source"], "hostPath");
  EXPECT_EQ(v["model"]["hostPath"]["path"], "/data/m");
  EXPECT_EQ(v["placement"]["policy"], "static");
  EXPECT_EQ(v["placement"]["table"], R"(["*:0-7=0"])"_json);
  o["spec"]["model"]["source"] = Json::object();
  ASSERT_OK_AND_ASSIGN(ClusterSpec bad, ParseCluster(o));
  EXPECT_THAT(ChartValues(bad, bad.pools, Json::object()),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(ChartValuesTest, MergeValuesMergesObjectsAndReplacesTheRest) {
  EXPECT_EQ(MergeValues(R"({"a": {"b": 1, "c": [1, 2]}, "d": 1})"_json,
                        R"({"a": {"c": [3]}, "e": 2})"_json),
            R"({"a": {"b": 1, "c": [3]}, "d": 1, "e": 2})"_json);
}

}  // namespace
}  // namespace moe::op
