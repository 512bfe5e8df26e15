// Where the autoscaler's numbers come from: instant PromQL queries against the Prometheus HTTP
// API (GET /api/v1/query). An interface so that controller tests can answer themselves.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace moe::op {

struct Sample {
  std::map<std::string, std::string> labels;
  double value = 0;
};

class MetricsSource {
 public:
  virtual ~MetricsSource() = default;
  // An instant vector (or a scalar, as one sample without labels). UNAVAILABLE when the server
  // cannot be reached; INVALID_ARGUMENT for a query it refuses.
  virtual absl::StatusOr<std::vector<Sample>> Query(const std::string& promql) = 0;
};

class PrometheusClient final : public MetricsSource {
 public:
  // `url`: "http://host:port" (a path prefix allowed: "http://host:port/prometheus").
  explicit PrometheusClient(std::string url, absl::Duration timeout = absl::Seconds(10));
  absl::StatusOr<std::vector<Sample>> Query(const std::string& promql) override;

 private:
  const std::string url_;
  const absl::Duration timeout_;
};

}  // namespace moe::op
