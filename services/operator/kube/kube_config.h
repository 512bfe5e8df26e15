// Where the API server is and how to authenticate to it: the pod's service account (in
// cluster) or a kubeconfig file (running outside). Reads files; takes the environment as a
// function so that tests pass their own.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace moe::op::kube {

struct KubeConfig {
  std::string host;  // "10.96.0.1", "127.0.0.1"
  int port = 443;
  bool tls = true;
  std::string ca_pem;  // trusted CAs (PEM); "" = the system's
  bool insecure_skip_tls_verify = false;
  std::string token;       // bearer token
  std::string token_file;  // re-read on every request when set (projected tokens rotate)
  std::string client_cert_pem;
  std::string client_key_pem;
  std::string ns = "default";  // the default namespace (the pod's, the context's)
};

// KUBERNETES_SERVICE_HOST / _PORT and /var/run/secrets/kubernetes.io/serviceaccount/{token,
// ca.crt, namespace} (`sa_dir`). FAILED_PRECONDITION when not in a pod; NOT_FOUND for a
// missing file.
absl::StatusOr<KubeConfig> InClusterConfig(
    const std::function<std::optional<std::string>(const std::string&)>& getenv,
    const std::string& sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// A kubeconfig file: `context` ("" = current-context) -> cluster server,
// certificate-authority(-data), insecure-skip-tls-verify; user token(-File),
// client-certificate(-data), client-key(-data); the context's namespace. Relative file paths
// are relative to the kubeconfig. INVALID_ARGUMENT naming what is missing or malformed.
absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context = "");

// "https://host:port" -> host, port, tls (port defaults 443 / 80).
absl::Status ParseServerUrl(const std::string& url, KubeConfig& config);

}  // namespace moe::op::kube
