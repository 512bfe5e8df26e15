// An in-test Kubernetes API server on loopback (HTTPS with a test CA made at first use, or
// plain HTTP), for the operator's HTTP layer, its processes and the local kubelet stand-in.
// It implements what the operator uses, for the resources it uses:
//   - get, list (labelSelector: `k=v`, `k!=v`, `k`), create, update (PUT; a stale
//     metadata.resourceVersion is 409 Conflict), delete (finalizers: deletionTimestamp first;
//     the object goes once the last finalizer is removed; dependents named by ownerReferences
//     are deleted with it, as the garbage collector would);
//   - watch with resourceVersion (events after it; none or "0" = the current objects as ADDED
//     first), allowWatchBookmarks (a BOOKMARK every bookmark_interval), timeoutSeconds, and
//     410 Gone (an ERROR event) for a version older than the last Compact();
//   - server-side apply (PATCH application/apply-patch+yaml, JSON bodies, ?fieldManager,
//     ?force): fields tracked per manager as leaf paths (lists are atomic); a field another
//     manager owns with a different value is a 409 Conflict unless forced; fields a manager
//     stops applying are removed unless another manager owns them;
//   - JSON merge patch (application/merge-patch+json);
//   - the status subresource: writes to the object ignore its status, writes to /status change
//     only the status; metadata.generation moves when the spec changes;
//   - bearer-token authentication (401 without it).
// Faults for tests: DropWatches() (every open watch ends mid-stream, connection closed),
// Compact() (older resourceVersions are gone), FailNext(method, path part, HTTP status).
// Not implemented: defaulting and validation from CRD schemas, field selectors, pagination,
// the scale subresource, admission.
//
// Thread-safety: thread-safe; requests are served on the server's threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Server;
}  // namespace httplib

namespace moe::op::testing {

using Json = nlohmann::json;

struct FakeApiServerOptions {
  bool tls = true;
  // Server certificate and key (PEM files); "" = the test PKI's (localhost, 127.0.0.1; made at
  // first use by common/grpc/testing/test_pki.h).
  std::string cert_path;
  std::string key_path;
  std::string token = "test-token";  // "" = no authentication
  // A second token whose requests are authorized by RBAC `rules` (a Role's rules: apiGroups,
  // resources with "/subresource", verbs; 403 Forbidden otherwise). "" = none.
  std::string restricted_token;
  Json restricted_rules = Json::array();
  absl::Duration bookmark_interval = absl::Milliseconds(500);
};

class FakeApiServer {
 public:
  static absl::StatusOr<std::unique_ptr<FakeApiServer>> Start(FakeApiServerOptions options = {});
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  int port() const { return port_; }
  // A kubeconfig (YAML) for this server with namespace `ns` (the test CA embedded), for
  // `token` ("" = options.token).
  std::string Kubeconfig(const std::string& ns, const std::string& token = "") const;
  // The test CA's PEM file (made at first use, under /tmp).
  static std::string TestCaPath();

  // The storage, as a client would see it. `plural` is "statefulsets", "moeclusters", ...
  std::optional<Json> Get(const std::string& plural, const std::string& ns,
                          const std::string& name) const;
  std::vector<Json> List(const std::string& plural, const std::string& ns = "") const;
  int64_t resource_version() const;

  // Faults.
  void DropWatches();
  void Compact();
  void FailNext(const std::string& method, const std::string& path_part, int http_status,
                int times = 1);

  struct Request {
    std::string method;
    std::string path;  // without the query
    std::string user_agent;
    std::string field_manager;
    int status = 0;
    std::string verb;      // the RBAC verb: get, list, watch, create, update, patch, delete
    std::string resource;  // "group/plural[/subresource]" ("" group for the core one)
  };
  std::vector<Request> Requests() const;
  int open_watches() const;

 private:
  struct Impl;
  explicit FakeApiServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_;
};

}  // namespace moe::op::testing
