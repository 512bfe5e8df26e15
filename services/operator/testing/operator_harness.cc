#include "services/operator/testing/operator_harness.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/base/file.h"
#include "common/process/listening.h"
#include "services/operator/kube/kube_config.h"
#include "services/operator/yaml_json.h"

namespace moe::op::testing {

std::string SourceDir() {
  const char* s = std::getenv("MOE_SOURCE_DIR");
  return s != nullptr ? s : ".";
}
std::string BuildDir() {
  const char* s = std::getenv("MOE_BUILD_DIR");
  return s != nullptr ? s : "build";
}
std::optional<std::string> HelmBinary() {
  const std::string h = SourceDir() + "/deploy/test/.tools/helm3/helm";
  return ::access(h.c_str(), X_OK) == 0 ? std::optional<std::string>(h) : std::nullopt;
}

absl::StatusOr<std::unique_ptr<OperatorHarness>> OperatorHarness::Create(const std::string& ns) {
  std::unique_ptr<OperatorHarness> h(new OperatorHarness());
  h->ns_ = ns;
  char tmpl[] = "/tmp/moe-operator-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
  h->dir_ = tmpl;
  // The operator's Role, as the chart renders it.
  nlohmann::json rules = nlohmann::json::array();
  if (auto helm = HelmBinary(); helm.has_value()) {
    auto r = common::process::RunToExit(
        {.argv = {*helm, "template", "moe", SourceDir() + "/deploy/k8s", "--namespace", ns, "--set",
                  "operator.enabled=true"},
         .env = std::vector<std::string>{"HOME=" + h->dir_, "HELM_CACHE_HOME=" + h->dir_ + "/helm",
                                         "HELM_CONFIG_HOME=" + h->dir_ + "/helm",
                                         "HELM_DATA_HOME=" + h->dir_ + "/helm"}},
        absl::Seconds(60));
    if (!r.ok()) return r.status();
    auto docs = ParseYamlDocuments(r->stdout_text);
    if (!docs.ok()) return docs.status();
    for (const auto& d : *docs) {
      if (d.value("kind", "") == "Role") rules = d["rules"];
    }
    if (rules.empty()) return absl::InternalError("the chart rendered no operator Role");
  }
  auto server =
      FakeApiServer::Start({.restricted_token = "operator-token", .restricted_rules = rules});
  if (!server.ok()) return server.status();
  h->server_ = *std::move(server);
  std::ofstream(h->dir_ + "/kubeconfig") << h->server_->Kubeconfig(ns);
  std::ofstream(h->dir_ + "/operator.kubeconfig") << h->server_->Kubeconfig(ns, "operator-token");
  auto config = kube::LoadKubeconfig(h->dir_ + "/kubeconfig");
  if (!config.ok()) return config.status();
  h->client_ = std::make_unique<kube::HttpKubeClient>(
      *config, kube::HttpKubeClientOptions{.user_agent = "kubectl"}, h->registry_);
  return h;
}

OperatorHarness::~OperatorHarness() {
  client_.reset();
  server_.reset();
  if (!dir_.empty() && std::getenv("MOE_KEEP_TEST_DIR") == nullptr) {
    const std::string cmd = "rm -rf '" + dir_ + "'";
    (void)std::system(cmd.c_str());
  }
}

absl::StatusOr<OperatorProcess> OperatorHarness::StartOperator(
    const std::string& identity, const std::vector<std::string>& extra) {
  auto helm = HelmBinary();
  if (!helm.has_value()) return absl::FailedPreconditionError("no helm (run scripts/setup)");
  OperatorProcess p;
  p.identity = identity;
  p.log = absl::StrCat(dir_, "/", identity, ".log");
  const std::string work = absl::StrCat(dir_, "/", identity);
  ::mkdir(work.c_str(), 0755);
  std::vector<std::string> argv = {BuildDir() + "/bin/operator",
                                   "--set",
                                   "kubeconfig=" + dir_ + "/operator.kubeconfig",
                                   "--set",
                                   "identity=" + identity,
                                   "--set",
                                   "helm=" + *helm,
                                   "--set",
                                   "chart=" + SourceDir() + "/deploy/k8s",
                                   "--set",
                                   "work_dir=" + work,
                                   "--set",
                                   "metrics.host=127.0.0.1",
                                   "--set",
                                   "metrics.port=0"};
  for (const std::string& e : extra) {
    argv.push_back("--set");
    argv.push_back(e);
  }
  auto child = common::process::ChildProcess::Spawn({.argv = argv, .stderr_path = p.log});
  if (!child.ok()) return child.status();
  p.child = *std::move(child);
  auto ports = common::process::WaitForListeningLine(*p.child, absl::Seconds(20));
  if (!ports.ok()) {
    return absl::Status(ports.status().code(),
                        absl::StrCat(ports.status().message(), "\n", p.child->Stderr()));
  }
  p.metrics_port = ports->metrics.value_or(0);
  p.child->DrainStdout();
  return p;
}

std::vector<std::string> OperatorHarness::Forbidden() const {
  std::vector<std::string> out;
  for (const auto& r : server_->Requests()) {
    if (r.status == 403) out.push_back(r.verb + " " + r.resource);
  }
  return out;
}

bool OperatorHarness::WaitFor(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return done();
}

}  // namespace moe::op::testing
