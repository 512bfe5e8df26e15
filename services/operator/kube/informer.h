// A reflector and its cache (client-go's Reflector + Indexer, reduced): list a resource, then
// watch it from the list's resourceVersion; every event updates the cache and calls the
// handler. A watch the server ends (its timeout) is resumed from the last resourceVersion seen
// (bookmarks move it forward without an object); a dropped connection is retried with backoff
// from there too; 410 Gone (that version is compacted away) lists again, and the handler sees
// the difference (adds, updates and deletes of objects that changed meanwhile).
//
// Metrics: moe_operator_watch_restarts_total{resource, reason} (reason: timeout, dropped,
// gone, error), moe_operator_cache_objects{resource}.
//
// Thread-safety: Start/Stop from one thread; the getters from any thread; the handler runs on
// the informer's thread, one event at a time.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "services/operator/kube/kube_client.h"

namespace moe::op::kube {

struct InformerOptions {
  Resource resource;
  std::string ns;              // "" = all namespaces
  std::string label_selector;  // "" = every object
  absl::Duration watch_timeout = absl::Minutes(5);
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(10);
};

class Informer {
 public:
  enum class Change { kAdded, kUpdated, kDeleted };
  // Called on the informer's thread after the cache changed.
  using Handler = std::function<void(Change, const Json& object)>;

  // `client`, `clock` and `registry` are borrowed and must outlive the informer.
  Informer(InformerOptions options, KubeClient& client, common::Clock& clock,
           common::metrics::Registry& registry, Handler handler);
  ~Informer();  // Stop()
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  // Ends the watch (KubeClient::CancelWatches is the caller's) and joins the thread.
  void Stop();

  // Whether the first list has filled the cache; WaitForSync waits up to `timeout` for it.
  bool HasSynced() const { return synced_.HasBeenNotified(); }
  bool WaitForSync(absl::Duration timeout) const {
    return synced_.WaitForNotificationWithTimeout(timeout);
  }

  // "ns/name" -> object; nullopt when absent.
  std::optional<Json> Get(const std::string& ns, const std::string& name) const;
  std::vector<Json> List() const;
  // The resourceVersion the cache is at (of the last event, list or bookmark).
  std::string resource_version() const;
  // Lists done (1 + relists after 410 Gone) and watches opened; for tests.
  int lists() const { return lists_.load(); }
  int watches() const { return watches_.load(); }

 private:
  struct Metrics;
  void Run();
  // Lists and replaces the cache, calling the handler for each difference. false on failure.
  bool Relist();

  const InformerOptions options_;
  KubeClient& client_;
  common::Clock& clock_;
  std::unique_ptr<Metrics> metrics_;
  const Handler handler_;

  std::thread thread_;
  std::atomic<bool> stop_{false};
  absl::Notification synced_;
  std::atomic<int> lists_{0}, watches_{0};

  mutable absl::Mutex mu_;
  std::map<std::string, Json> cache_ ABSL_GUARDED_BY(mu_);
  std::string resource_version_ ABSL_GUARDED_BY(mu_);
};

// "ns/name" of an object.
std::string CacheKey(const Json& object);

}  // namespace moe::op::kube
