// KubeClient over HTTPS (or plain HTTP to a local test server) with cpp-httplib and OpenSSL:
// a bearer token (re-read from token_file on every request: projected service-account tokens
// rotate) or a client certificate, the server verified against the configured CA.
//
// One connection per request (and per watch): requests are few (a reconcile is a handful), and
// no connection state is shared between threads. Watches stream the response body line by line
// (one JSON event a line); every request has `timeout`, a watch its own timeout plus a margin.
//
// Metrics: moe_operator_api_requests_total{verb, code} (code = HTTP status, or "error" when no
// response came), moe_operator_api_request_seconds{verb}.
//
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/metrics/registry.h"
#include "services/operator/kube/kube_client.h"
#include "services/operator/kube/kube_config.h"

namespace httplib {
class ClientImpl;
}  // namespace httplib

namespace moe::op::kube {

struct HttpKubeClientOptions {
  absl::Duration timeout = absl::Seconds(30);  // of each request but watches
  std::string user_agent = "moe-operator";     // the API server's audit log names it
};

class HttpKubeClient final : public KubeClient {
 public:
  // `registry` is borrowed and must outlive the client.
  HttpKubeClient(KubeConfig config, HttpKubeClientOptions options,
                 common::metrics::Registry& registry);
  ~HttpKubeClient() override;
  HttpKubeClient(const HttpKubeClient&) = delete;
  HttpKubeClient& operator=(const HttpKubeClient&) = delete;

  // KubeClient
  absl::StatusOr<Json> Get(const Resource& r, const std::string& ns,
                           const std::string& name) override;
  absl::StatusOr<ListResult> List(const Resource& r, const std::string& ns,
                                  const std::string& label_selector) override;
  absl::Status Watch(const WatchRequest& request,
                     const std::function<bool(const WatchEvent&)>& on_event) override;
  void CancelWatches() override;
  absl::StatusOr<Json> Create(const Resource& r, const std::string& ns,
                              const Json& object) override;
  absl::StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                              const std::string& subresource = "") override;
  absl::StatusOr<Json> Apply(const Resource& r, const std::string& ns, const Json& object,
                             const ApplyOptions& options) override;
  absl::Status Delete(const Resource& r, const std::string& ns, const std::string& name) override;

 private:
  struct Metrics;
  // A connected client for one request (TLS, CA, client certificate, token set).
  absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> Connect(absl::Duration read_timeout);
  // One request; the parsed JSON body, or the error of StatusFromHttp.
  absl::StatusOr<Json> Call(const char* verb, const std::string& method, const std::string& path,
                            const std::string& body, const std::string& content_type);

  const KubeConfig config_;
  const HttpKubeClientOptions options_;
  std::unique_ptr<Metrics> metrics_;

  absl::Mutex mu_;
  std::set<httplib::ClientImpl*> watches_ ABSL_GUARDED_BY(mu_);  // in progress
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe::op::kube
