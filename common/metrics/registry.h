// The metrics registry injected into components (STYLE.md rule 7): never a global.
//
// A component declares its metrics once, as a plain struct built from the registry:
//
//   struct EchoMetrics {
//     explicit EchoMetrics(metrics::Registry& r)
//         : requests_total(r.AddCounter("moe_echo_requests_total", "Echo RPCs served.")),
//           latency_seconds(r.AddHistogram("moe_echo_latency_seconds", "Echo latency.",
//                                          metrics::LatencyBuckets())),
//           requests_by_status(r.CounterFamily("moe_echo_status_total", "Echo RPCs by code.")) {}
//     metrics::Counter& requests_total;
//     metrics::Histogram& latency_seconds;
//     metrics::Family<metrics::Counter>& requests_by_status;  // .Add({{"code", "OK"}}).Increment()
//   };
//
// Names follow DESIGN.md §5: prefix `moe_`, base units, `_total` for counters; labels are
// low-cardinality. Registering a name twice with the same type returns the same family (so two
// components may share one); an invalid name or a type clash is a programming error and
// CHECK-fails at construction.
//
// Each Registry is independent, so a test's `metrics::Registry registry;` is isolated and can
// assert exact counts with Value().
//
// Thread-safety: all methods, and the returned Counter/Gauge/Histogram/Family, are thread-safe.
// Lifetime: returned references live as long as the Registry.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"

namespace prometheus {
class Registry;
}  // namespace prometheus

namespace moe::common::metrics {

using Counter = prometheus::Counter;
using Gauge = prometheus::Gauge;
using Histogram = prometheus::Histogram;
template <typename T>
using Family = prometheus::Family<T>;
using Labels = std::map<std::string, std::string>;
using Buckets = std::vector<double>;

// Upper bounds `start * factor^i` for i in [0, count). REQUIRES: start > 0, factor > 1, count > 0.
Buckets ExponentialBuckets(double start, double factor, int count);
// Latency buckets in seconds, 0.5 ms .. ~65 s (factor 2): RPCs, TTFT, stages.
const Buckets& LatencyBuckets();

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Families: add one series per label set with family.Add(labels) (histograms:
  // family.Add(labels, buckets)).
  Family<Counter>& CounterFamily(const std::string& name, const std::string& help);
  Family<Gauge>& GaugeFamily(const std::string& name, const std::string& help);
  Family<Histogram>& HistogramFamily(const std::string& name, const std::string& help);

  // One series of a family (created on first use).
  Counter& AddCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge& AddGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram& AddHistogram(const std::string& name, const std::string& help, const Buckets& buckets,
                          const Labels& labels = {});

  // The Prometheus text exposition format (version 0.0.4) of every series.
  std::string TextExposition() const;

  // The current value of the series `name`{labels}: a counter's or gauge's value, a histogram's
  // sample count. kNotFound when no such family or series exists. For tests and `moe admin`.
  absl::StatusOr<double> Value(const std::string& name, const Labels& labels = {}) const;
  // A histogram series' sum of observations. kNotFound as above.
  absl::StatusOr<double> HistogramSum(const std::string& name, const Labels& labels = {}) const;

  // The prometheus-cpp registry behind this one (for a prometheus::Exposer, if ever needed).
  const std::shared_ptr<prometheus::Registry>& prometheus_registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
};

}  // namespace moe::common::metrics
