// The one renderer (issue: "not two hand-kept copies"): the operator applies what the Helm
// chart (deploy/k8s) renders for a MoECluster's values (core/chart_values.h), instead of a
// second copy of the chart's objects in C++. HelmRenderer runs `helm template` on the chart;
// tests of the controller may pass another ChartRenderer.
//
// Thread-safety: implementations are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace moe::op {

class ChartRenderer {
 public:
  virtual ~ChartRenderer() = default;
  // The chart's objects for `values`, as release `release` in namespace `ns`.
  virtual absl::StatusOr<std::vector<nlohmann::json>> Render(const std::string& release,
                                                             const std::string& ns,
                                                             const nlohmann::json& values) = 0;
};

struct HelmRendererOptions {
  std::string helm = "helm";      // the binary (absolute path: no PATH search)
  std::string chart;              // the chart's directory (deploy/k8s)
  std::string work_dir = "/tmp";  // values files and Helm's cache/config/data homes
  absl::Duration timeout = absl::Seconds(60);
  int cache_entries = 16;  // renders kept by (release, namespace, values)
};

class HelmRenderer final : public ChartRenderer {
 public:
  explicit HelmRenderer(HelmRendererOptions options);
  // ChartRenderer. Errors: helm's stderr as INVALID_ARGUMENT (a value the chart refuses: its
  // schema or its checks), UNAVAILABLE when helm cannot run or times out.
  absl::StatusOr<std::vector<nlohmann::json>> Render(const std::string& release,
                                                     const std::string& ns,
                                                     const nlohmann::json& values) override;
  int renders() const;  // helm runs so far (cache misses)

 private:
  const HelmRendererOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::vector<nlohmann::json>> cache_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // oldest first
  int renders_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace moe::op
