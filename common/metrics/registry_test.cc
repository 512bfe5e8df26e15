#include "common/metrics/registry.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::metrics {
namespace {

using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::testing::HasSubstr;

// The shape every component uses: a plain struct of references built from the registry.
struct WidgetMetrics {
  explicit WidgetMetrics(Registry& r)
      : requests_total(r.AddCounter("moe_widget_requests_total", "Requests.")),
        queue_depth(r.AddGauge("moe_widget_queue_depth", "Waiting requests.")),
        latency_seconds(r.AddHistogram("moe_widget_latency_seconds", "Latency.", {0.1, 1.0, 10.0})),
        finished_total(r.CounterFamily("moe_widget_finished_total", "Finished, by reason.")) {}
  Counter& requests_total;
  Gauge& queue_depth;
  Histogram& latency_seconds;
  Family<Counter>& finished_total;
};

TEST(RegistryTest, CountsExactly) {
  Registry registry;
  WidgetMetrics m(registry);
  m.requests_total.Increment();
  m.requests_total.Increment(2);
  m.queue_depth.Set(7);
  m.queue_depth.Decrement();
  m.latency_seconds.Observe(0.5);
  m.latency_seconds.Observe(2.0);
  m.finished_total.Add({{"finish_reason", "stop"}}).Increment();
  m.finished_total.Add({{"finish_reason", "stop"}}).Increment();
  m.finished_total.Add({{"finish_reason", "length"}}).Increment();

  EXPECT_THAT(registry.Value("moe_widget_requests_total"), IsOkAndHolds(3));
  EXPECT_THAT(registry.Value("moe_widget_queue_depth"), IsOkAndHolds(6));
  EXPECT_THAT(registry.Value("moe_widget_latency_seconds"), IsOkAndHolds(2));
  EXPECT_THAT(registry.HistogramSum("moe_widget_latency_seconds"), IsOkAndHolds(2.5));
  EXPECT_THAT(registry.Value("moe_widget_finished_total", {{"finish_reason", "stop"}}),
              IsOkAndHolds(2));
  EXPECT_THAT(registry.Value("moe_widget_finished_total", {{"finish_reason", "length"}}),
              IsOkAndHolds(1));
}

TEST(RegistryTest, UnknownSeriesIsNotFound) {
  Registry registry;
  WidgetMetrics m(registry);
  EXPECT_THAT(registry.Value("moe_nope_total"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(registry.Value("moe_widget_finished_total", {{"finish_reason", "abort"}}),
              StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(registry.HistogramSum("moe_widget_requests_total"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST(RegistryTest, RegistriesAreIsolated) {
  Registry a;
  Registry b;
  WidgetMetrics ma(a);
  WidgetMetrics mb(b);
  ma.requests_total.Increment(5);
  EXPECT_THAT(a.Value("moe_widget_requests_total"), IsOkAndHolds(5));
  EXPECT_THAT(b.Value("moe_widget_requests_total"), IsOkAndHolds(0));
}

TEST(RegistryTest, SameNameSharesTheSeries) {
  Registry registry;
  Counter& first = registry.AddCounter("moe_shared_total", "Shared.");
  Counter& second = registry.AddCounter("moe_shared_total", "Shared.");
  EXPECT_EQ(&first, &second);
}

TEST(RegistryTest, TextExpositionHasTypesAndSamples) {
  Registry registry;
  registry.AddCounter("moe_requests_total", "Requests.", {{"model", "tiny"}}).Increment(3);
  registry.AddGauge("vllm:num_requests_waiting", "Waiting.").Set(2);
  const std::string text = registry.TextExposition();
  EXPECT_THAT(text, HasSubstr("# HELP moe_requests_total Requests.\n"
                              "# TYPE moe_requests_total counter\n"
                              "moe_requests_total{model=\"tiny\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE vllm:num_requests_waiting gauge\n"
                              "vllm:num_requests_waiting 2\n"));
}

TEST(RegistryTest, LatencyBucketsAreIncreasingSeconds) {
  const Buckets& b = LatencyBuckets();
  ASSERT_EQ(b.size(), 18u);
  EXPECT_DOUBLE_EQ(b.front(), 0.0005);
  EXPECT_GT(b.back(), 60.0);
  EXPECT_EQ(ExponentialBuckets(1, 10, 3), (Buckets{1, 10, 100}));
}

TEST(RegistryDeathTest, InvalidNameFailsAtConstruction) {
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddCounter("bad name", "x");
      },
      "metric bad name");
}

TEST(RegistryDeathTest, TypeClashFailsAtConstruction) {
  EXPECT_DEATH(
      {
        Registry registry;
        registry.AddCounter("moe_clash", "x");
        registry.AddGauge("moe_clash", "x");
      },
      "metric moe_clash");
}

}  // namespace
}  // namespace moe::common::metrics
