#include "services/operator/kube/kube_config.h"

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/file.h"
#include "common/base/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace moe::op::kube {

absl::Status ParseServerUrl(const std::string& url, KubeConfig& c) {
  absl::string_view rest = url;
  if (absl::ConsumePrefix(&rest, "https://")) {
    c.tls = true;
    c.port = 443;
  } else if (absl::ConsumePrefix(&rest, "http://")) {
    c.tls = false;
    c.port = 80;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("server \"", url, "\": want https://host:port"));
  }
  absl::ConsumeSuffix(&rest, "/");
  std::string hostport(rest);
  if (!hostport.empty() && hostport[0] == '[') {  // [::1]:6443
    const size_t close = hostport.find(']');
    if (close == std::string::npos) return absl::InvalidArgumentError("server: bad IPv6 address");
    c.host = hostport.substr(1, close - 1);
    hostport = hostport.substr(close + 1);
    if (!hostport.empty() && hostport[0] == ':' && !absl::SimpleAtoi(hostport.substr(1), &c.port)) {
      return absl::InvalidArgumentError("server: bad port");
    }
    return absl::OkStatus();
  }
  const size_t colon = hostport.rfind(':');
  c.host = hostport.substr(0, colon);
  if (colon != std::string::npos && !absl::SimpleAtoi(hostport.substr(colon + 1), &c.port)) {
    return absl::InvalidArgumentError(absl::StrCat("server \"", url, "\": bad port"));
  }
  if (c.host.empty())
    return absl::InvalidArgumentError(absl::StrCat("server \"", url, "\": no host"));
  return absl::OkStatus();
}

absl::StatusOr<KubeConfig> InClusterConfig(
    const std::function<std::optional<std::string>(const std::string&)>& getenv,
    const std::string& sa_dir) {
  const auto host = getenv("KUBERNETES_SERVICE_HOST");
  const auto port = getenv("KUBERNETES_SERVICE_PORT");
  if (!host.has_value() || !port.has_value() || host->empty()) {
    return absl::FailedPreconditionError(
        "not in a pod (KUBERNETES_SERVICE_HOST/PORT unset): pass --kubeconfig");
  }
  KubeConfig c;
  c.host = *host;
  if (!absl::SimpleAtoi(*port, &c.port)) {
    return absl::InvalidArgumentError("KUBERNETES_SERVICE_PORT is not a port: " + *port);
  }
  c.token_file = sa_dir + "/token";
  ASSIGN_OR_RETURN(c.token, common::ReadFile(c.token_file));
  ASSIGN_OR_RETURN(c.ca_pem, common::ReadFile(sa_dir + "/ca.crt"));
  if (auto ns = common::ReadFile(sa_dir + "/namespace"); ns.ok()) {
    c.ns = std::string(absl::StripAsciiWhitespace(*ns));
  }
  return c;
}

namespace {

// The `name`d entry of list `key` (clusters, users, contexts) of a kubeconfig.
YAML::Node Named(const YAML::Node& root, const char* key, const std::string& name) {
  for (const auto& e : root[key]) {
    if (e["name"] && e["name"].as<std::string>() == name) return e;
  }
  return YAML::Node();
}

// A `<field>-data` (base64) or `<field>` (a file) value; "" when neither is set.
absl::StatusOr<std::string> DataOrFile(const YAML::Node& n, const std::string& field,
                                       const std::string& dir) {
  if (n[field + "-data"]) {
    std::string out;
    if (!absl::Base64Unescape(n[field + "-data"].as<std::string>(), &out)) {
      return absl::InvalidArgumentError(field + "-data is not base64");
    }
    return out;
  }
  if (n[field]) {
    std::string path = n[field].as<std::string>();
    if (!path.empty() && path[0] != '/') path = dir + "/" + path;
    return common::ReadFile(path);
  }
  return std::string();
}

}  // namespace

absl::StatusOr<KubeConfig> LoadKubeconfig(const std::string& path, const std::string& context) {
  ASSIGN_OR_RETURN(std::string text, common::ReadFile(path));
  const std::string dir =
      path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  try {
    const YAML::Node root = YAML::Load(text);
    const std::string ctx_name =
        !context.empty()
            ? context
            : (root["current-context"] ? root["current-context"].as<std::string>() : "");
    const YAML::Node ctx = Named(root, "contexts", ctx_name)["context"];
    if (!ctx) return absl::InvalidArgumentError(path + ": no context \"" + ctx_name + "\"");
    const YAML::Node cluster =
        Named(root, "clusters", ctx["cluster"].as<std::string>(""))["cluster"];
    if (!cluster || !cluster["server"]) {
      return absl::InvalidArgumentError(path + ": context \"" + ctx_name +
                                        "\" has no cluster server");
    }
    KubeConfig c;
    RETURN_IF_ERROR(ParseServerUrl(cluster["server"].as<std::string>(), c));
    ASSIGN_OR_RETURN(c.ca_pem, DataOrFile(cluster, "certificate-authority", dir));
    c.insecure_skip_tls_verify = cluster["insecure-skip-tls-verify"].as<bool>(false);
    if (ctx["namespace"]) c.ns = ctx["namespace"].as<std::string>();
    const YAML::Node user = Named(root, "users", ctx["user"].as<std::string>(""))["user"];
    if (user) {
      if (user["token"]) c.token = user["token"].as<std::string>();
      if (user["tokenFile"]) {
        c.token_file = user["tokenFile"].as<std::string>();
        ASSIGN_OR_RETURN(c.token, common::ReadFile(c.token_file));
      }
      ASSIGN_OR_RETURN(c.client_cert_pem, DataOrFile(user, "client-certificate", dir));
      ASSIGN_OR_RETURN(c.client_key_pem, DataOrFile(user, "client-key", dir));
    }
    return c;
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(path + ": " + e.what());
  }
}

}  // namespace moe::op::kube
