#include "services/operator/chart_renderer.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/file.h"
#include "common/process/child_process.h"
#include "services/operator/yaml_json.h"

namespace moe::op {

HelmRenderer::HelmRenderer(HelmRendererOptions options) : options_(std::move(options)) {}

int HelmRenderer::renders() const {
  absl::MutexLock lock(&mu_);
  return renders_;
}

absl::StatusOr<std::vector<nlohmann::json>> HelmRenderer::Render(const std::string& release,
                                                                 const std::string& ns,
                                                                 const nlohmann::json& values) {
  const std::string key = absl::StrCat(release, "\n", ns, "\n", values.dump());
  int64_t seq;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    seq = ++seq_;
  }
  const std::string base = absl::StrCat(options_.work_dir, "/moe-render-", ::getpid(), "-", seq);
  const std::string values_path = base + ".values.json";
  const std::string stderr_path = base + ".stderr";
  {
    std::ofstream f(values_path);
    f << values.dump();
    if (!f) return absl::UnavailableError("cannot write " + values_path);
  }
  common::process::SpawnOptions spawn;
  spawn.argv = {options_.helm, "template", release,    options_.chart,
                "--namespace", ns,         "--values", values_path};
  spawn.env = std::vector<std::string>{"HELM_CACHE_HOME=" + options_.work_dir + "/helm/cache",
                                       "HELM_CONFIG_HOME=" + options_.work_dir + "/helm/config",
                                       "HELM_DATA_HOME=" + options_.work_dir + "/helm/data",
                                       "HOME=" + options_.work_dir};
  spawn.stderr_path = stderr_path;
  auto run = common::process::RunToExit(spawn, options_.timeout);
  std::string err = common::ReadFile(stderr_path).value_or("");
  std::remove(values_path.c_str());
  std::remove(stderr_path.c_str());
  if (!run.ok()) return absl::UnavailableError(absl::StrCat("helm: ", run.status().message()));
  if (run->exit_code != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("helm template (exit ", run->exit_code, "): ", err));
  }
  auto objects = ParseYamlDocuments(run->stdout_text);
  if (!objects.ok()) return objects.status();
  absl::MutexLock lock(&mu_);
  ++renders_;
  cache_[key] = *objects;
  order_.push_back(key);
  while (static_cast<int>(order_.size()) > options_.cache_entries) {
    cache_.erase(order_.front());
    order_.erase(order_.begin());
  }
  return *objects;
}

}  // namespace moe::op
