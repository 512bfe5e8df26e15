#include "common/metrics/registry.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "common/base/check.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace moe::common::metrics {
namespace {

// prometheus-cpp reports bad names and type clashes by throwing; those are programming errors
// in a component's metrics struct, so they stop the process at construction with the name.
template <typename Builder>
auto& RegisterOrDie(Builder builder, const std::string& name, const std::string& help,
                    prometheus::Registry& registry) {
  try {
    return builder.Name(name).Help(help).Register(registry);
  } catch (const std::exception& e) {
    const std::string msg = absl::StrCat("metric ", name, ": ", e.what());
    MOE_CHECK_MSG(false, msg.c_str());
    __builtin_unreachable();
  }
}

bool SameLabels(const std::vector<prometheus::ClientMetric::Label>& have, const Labels& want) {
  if (have.size() != want.size()) return false;
  for (const auto& label : have) {
    auto it = want.find(label.name);
    if (it == want.end() || it->second != label.value) return false;
  }
  return true;
}

struct Series {
  prometheus::MetricType type;
  prometheus::ClientMetric metric;
};

absl::StatusOr<Series> FindSeries(const prometheus::Registry& registry, const std::string& name,
                                  const Labels& labels) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      if (SameLabels(metric.label, labels)) return Series{family.type, metric};
    }
    return absl::NotFoundError(absl::StrCat("metric ", name, " has no series with these labels"));
  }
  return absl::NotFoundError(absl::StrCat("no metric named ", name));
}

}  // namespace

Buckets ExponentialBuckets(double start, double factor, int count) {
  MOE_CHECK(start > 0 && factor > 1 && count > 0);
  Buckets out;
  out.reserve(count);
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) out.push_back(bound);
  return out;
}

const Buckets& LatencyBuckets() {
  static const Buckets* const buckets = new Buckets(ExponentialBuckets(0.0005, 2, 18));
  return *buckets;
}

Registry::Registry() : registry_(std::make_shared<prometheus::Registry>()) {}
Registry::~Registry() = default;

Family<Counter>& Registry::CounterFamily(const std::string& name, const std::string& help) {
  return RegisterOrDie(prometheus::BuildCounter(), name, help, *registry_);
}

Family<Gauge>& Registry::GaugeFamily(const std::string& name, const std::string& help) {
  return RegisterOrDie(prometheus::BuildGauge(), name, help, *registry_);
}

Family<Histogram>& Registry::HistogramFamily(const std::string& name, const std::string& help) {
  return RegisterOrDie(prometheus::BuildHistogram(), name, help, *registry_);
}

Counter& Registry::AddCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  return CounterFamily(name, help).Add(labels);
}

Gauge& Registry::AddGauge(const std::string& name, const std::string& help, const Labels& labels) {
  return GaugeFamily(name, help).Add(labels);
}

Histogram& Registry::AddHistogram(const std::string& name, const std::string& help,
                                  const Buckets& buckets, const Labels& labels) {
  return HistogramFamily(name, help).Add(labels, buckets);
}

std::string Registry::TextExposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

absl::StatusOr<double> Registry::Value(const std::string& name, const Labels& labels) const {
  absl::StatusOr<Series> s = FindSeries(*registry_, name, labels);
  if (!s.ok()) return s.status();
  switch (s->type) {
    case prometheus::MetricType::Counter:
      return s->metric.counter.value;
    case prometheus::MetricType::Gauge:
      return s->metric.gauge.value;
    case prometheus::MetricType::Histogram:
      return static_cast<double>(s->metric.histogram.sample_count);
    default:
      return absl::UnimplementedError(absl::StrCat("metric ", name, " has an unsupported type"));
  }
}

absl::StatusOr<double> Registry::HistogramSum(const std::string& name, const Labels& labels) const {
  absl::StatusOr<Series> s = FindSeries(*registry_, name, labels);
  if (!s.ok()) return s.status();
  if (s->type != prometheus::MetricType::Histogram) {
    return absl::NotFoundError(absl::StrCat("metric ", name, " is not a histogram"));
  }
  return s->metric.histogram.sample_sum;
}

}  // namespace moe::common::metrics
