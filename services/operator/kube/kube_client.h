// The Kubernetes API, as much of it as the operator uses: get, list and watch (with
// resourceVersion and bookmarks), create, update (optimistic concurrency), server-side apply
// (a fieldManager; `force` takes fields over from other managers), the status subresource and
// delete. Objects are JSON (nlohmann), as the API serves them.
//
// Error codes, by how a caller retries:
//   NOT_FOUND          404: the object (or its namespace) does not exist
//   ALREADY_EXISTS     409 on create
//   ABORTED            409 otherwise: a resourceVersion precondition failed (re-read, retry) or
//                      an apply conflict without force
//   OUT_OF_RANGE       410 Gone: the resourceVersion is too old (list again)
//   INVALID_ARGUMENT   400, 422: the object is refused (do not retry unchanged)
//   PERMISSION_DENIED  403 (RBAC), UNAUTHENTICATED 401
//   UNAVAILABLE        429, 5xx, a connection that failed or dropped (retry with backoff)
// The message carries the API's Status message.
//
// Thread-safety: implementations are thread-safe; Watch blocks its caller.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace moe::op::kube {

using Json = nlohmann::json;

// A resource type: "apps/v1" + "statefulsets".
struct Resource {
  std::string api_version;  // "v1", "apps/v1", "moe-cluster.io/v1alpha1"
  std::string plural;       // "statefulsets"
  bool namespaced = true;
  // "/apis/apps/v1/namespaces/NS/statefulsets[/NAME[/SUB]]" ("/api/v1/..." for the core group);
  // `ns` "" = all namespaces (collections only).
  std::string Path(const std::string& ns, const std::string& name = "",
                   const std::string& subresource = "") const;
  std::string DebugString() const { return api_version + "/" + plural; }
};

// ConfigMaps (the operator's rendered service configs; the informer and client tests' resource).
inline const Resource kConfigMaps{"v1", "configmaps", true};

struct ListResult {
  std::vector<Json> items;       // each with apiVersion and kind set
  std::string resource_version;  // of the list: watch from here
};

struct WatchEvent {
  enum class Type { kAdded, kModified, kDeleted, kBookmark };
  Type type = Type::kAdded;
  Json object;  // a bookmark's holds only metadata.resourceVersion
};

struct WatchRequest {
  Resource resource;
  std::string ns;              // "" = all namespaces
  std::string label_selector;  // "a=b,c=d"; "" = all
  std::string resource_version;
  absl::Duration timeout = absl::Minutes(5);  // the server ends the watch after this
  bool bookmarks = true;
};

struct ApplyOptions {
  std::string field_manager;
  bool force = true;
  std::string subresource;  // "" or "status"
};

class KubeClient {
 public:
  virtual ~KubeClient() = default;

  virtual absl::StatusOr<Json> Get(const Resource& r, const std::string& ns,
                                   const std::string& name) = 0;
  virtual absl::StatusOr<ListResult> List(const Resource& r, const std::string& ns,
                                          const std::string& label_selector) = 0;
  // Streams events to `on_event` until the server ends the watch (OK: watch again from the last
  // resourceVersion seen), `on_event` returns false (CANCELLED), the connection drops
  // (UNAVAILABLE), the resourceVersion is too old (OUT_OF_RANGE: list again), or CancelWatches.
  virtual absl::Status Watch(const WatchRequest& request,
                             const std::function<bool(const WatchEvent&)>& on_event) = 0;
  // Ends every Watch of this client in progress (they return CANCELLED). For shutdown.
  virtual void CancelWatches() = 0;

  virtual absl::StatusOr<Json> Create(const Resource& r, const std::string& ns,
                                      const Json& object) = 0;
  // PUT of `object` (its metadata.resourceVersion is the precondition: ABORTED when stale);
  // `subresource` "status" writes the status only.
  virtual absl::StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object,
                                      const std::string& subresource = "") = 0;
  // Server-side apply of `object` (its apiVersion, kind, metadata.name set).
  virtual absl::StatusOr<Json> Apply(const Resource& r, const std::string& ns, const Json& object,
                                     const ApplyOptions& options) = 0;
  virtual absl::Status Delete(const Resource& r, const std::string& ns,
                              const std::string& name) = 0;
};

// An HTTP status and the API's Status body as an absl::Status (the table above); OK for 2xx.
absl::Status StatusFromHttp(int http_status, const std::string& body);

}  // namespace moe::op::kube
