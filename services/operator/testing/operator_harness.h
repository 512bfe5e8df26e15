// For the operator's process tests: the in-test API server, a kubeconfig for it, and `operator`
// processes (from $MOE_BUILD_DIR/bin) with the chart and Helm of this checkout.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"
#include "services/operator/kube/http_kube_client.h"
#include "services/operator/testing/fake_api_server.h"

namespace moe::op::testing {

// $MOE_SOURCE_DIR / $MOE_BUILD_DIR (ctest sets them), or "." / "build".
std::string SourceDir();
std::string BuildDir();
// deploy/test/.tools/helm3/helm, when scripts/setup unpacked it; nullopt otherwise.
std::optional<std::string> HelmBinary();

struct OperatorProcess {
  std::string identity;
  std::unique_ptr<common::process::ChildProcess> child;
  int metrics_port = 0;
  std::string log;  // its stderr file
};

class OperatorHarness {
 public:
  // A fresh API server and a work directory. The operators it starts authenticate with a token
  // the server authorizes by the chart's operator Role (deploy/k8s/templates/operator/rbac.yaml,
  // rendered with Helm): a request outside it is 403 Forbidden (see Forbidden()).
  static absl::StatusOr<std::unique_ptr<OperatorHarness>> Create(const std::string& ns);
  // "VERB group/resource" of every request the Role refused so far.
  std::vector<std::string> Forbidden() const;
  ~OperatorHarness();

  FakeApiServer& server() { return *server_; }
  kube::KubeClient& client() { return *client_; }  // as "kubectl"
  const std::string& dir() const { return dir_; }
  const std::string& ns() const { return ns_; }

  // Starts `operator` as `identity` with `extra` --set assignments, up to its listening line.
  absl::StatusOr<OperatorProcess> StartOperator(const std::string& identity,
                                                const std::vector<std::string>& extra);
  // Polls `done` every 50 ms until it returns true or `timeout` passes.
  static bool WaitFor(const std::function<bool()>& done, absl::Duration timeout);

 private:
  OperatorHarness() = default;
  std::string ns_, dir_;
  common::metrics::Registry registry_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<kube::HttpKubeClient> client_;
};

}  // namespace moe::op::testing
