#include "services/operator/kube/informer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"

namespace moe::op::kube {

std::string CacheKey(const Json& o) {
  const Json meta = o.value("metadata", Json::object());
  return absl::StrCat(meta.value("namespace", ""), "/", meta.value("name", ""));
}

struct Informer::Metrics {
  Metrics(common::metrics::Registry& r, const std::string& resource)
      : restarts(r.CounterFamily("moe_operator_watch_restarts_total",
                                 "Watches restarted, by resource and why.")),
        objects(r.AddGauge("moe_operator_cache_objects", "Objects in an informer's cache.",
                           {{"resource", resource}})),
        resource(resource) {}
  void Restart(const char* reason) {
    restarts.Add({{"resource", resource}, {"reason", reason}}).Increment();
  }
  common::metrics::Family<common::metrics::Counter>& restarts;
  common::metrics::Gauge& objects;
  const std::string resource;
};

Informer::Informer(InformerOptions options, KubeClient& client, common::Clock& clock,
                   common::metrics::Registry& registry, Handler handler)
    : options_(std::move(options)),
      client_(client),
      clock_(clock),
      metrics_(std::make_unique<Metrics>(registry, options_.resource.plural)),
      handler_(std::move(handler)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Informer::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::optional<Json> Informer::Get(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = cache_.find(absl::StrCat(ns, "/", name));
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

std::vector<Json> Informer::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<Json> out;
  out.reserve(cache_.size());
  for (const auto& [k, o] : cache_) out.push_back(o);
  return out;
}

std::string Informer::resource_version() const {
  absl::MutexLock lock(&mu_);
  return resource_version_;
}

bool Informer::Relist() {
  auto list = client_.List(options_.resource, options_.ns, options_.label_selector);
  if (!list.ok()) {
    MOE_LOG_WARN("operator: list {}: {}", options_.resource.DebugString(),
                 list.status().ToString());
    return false;
  }
  ++lists_;
  std::map<std::string, Json> fresh;
  for (Json& o : list->items) {
    const std::string key = CacheKey(o);
    fresh[key] = std::move(o);
  }
  std::vector<std::pair<Change, Json>> changes;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [k, o] : cache_) {
      if (!fresh.count(k)) changes.emplace_back(Change::kDeleted, o);
    }
    for (const auto& [k, o] : fresh) {
      auto it = cache_.find(k);
      if (it == cache_.end()) {
        changes.emplace_back(Change::kAdded, o);
      } else if (it->second != o) {
        changes.emplace_back(Change::kUpdated, o);
      }
    }
    cache_ = std::move(fresh);
    resource_version_ = list->resource_version;
    metrics_->objects.Set(static_cast<double>(cache_.size()));
  }
  if (!synced_.HasBeenNotified()) synced_.Notify();
  for (const auto& [c, o] : changes) handler_(c, o);
  return true;
}

void Informer::Run() {
  absl::Duration backoff = options_.initial_backoff;
  auto wait = [&] {
    // Sleep in short steps so that Stop() is prompt.
    const absl::Time until = clock_.Now() + backoff;
    while (!stop_ && clock_.Now() < until) {
      clock_.SleepFor(std::min(absl::Milliseconds(20), until - clock_.Now()));
    }
    backoff = std::min(backoff * 2, options_.max_backoff);
  };
  bool need_list = true;
  while (!stop_) {
    if (need_list) {
      if (!Relist()) {
        wait();
        continue;
      }
      need_list = false;
    }
    WatchRequest req{.resource = options_.resource,
                     .ns = options_.ns,
                     .label_selector = options_.label_selector,
                     .resource_version = resource_version(),
                     .timeout = options_.watch_timeout};
    ++watches_;
    absl::Status s = client_.Watch(req, [&](const WatchEvent& ev) {
      if (stop_) return false;
      const std::string rv =
          ev.object.value("metadata", Json::object()).value("resourceVersion", "");
      if (ev.type == WatchEvent::Type::kBookmark) {
        absl::MutexLock lock(&mu_);
        if (!rv.empty()) resource_version_ = rv;
        return true;
      }
      Change change = Change::kAdded;
      {
        absl::MutexLock lock(&mu_);
        const std::string key = CacheKey(ev.object);
        if (ev.type == WatchEvent::Type::kDeleted) {
          cache_.erase(key);
          change = Change::kDeleted;
        } else {
          change = cache_.count(key) ? Change::kUpdated : Change::kAdded;
          cache_[key] = ev.object;
        }
        if (!rv.empty()) resource_version_ = rv;
        metrics_->objects.Set(static_cast<double>(cache_.size()));
      }
      handler_(change, ev.object);
      backoff = options_.initial_backoff;  // the watch works
      return true;
    });
    if (stop_) break;
    if (s.ok()) {
      metrics_->Restart("timeout");
    } else if (s.code() == absl::StatusCode::kOutOfRange) {
      MOE_LOG_INFO("operator: watch {}: {}; listing again", options_.resource.DebugString(),
                   std::string(s.message()));
      metrics_->Restart("gone");
      need_list = true;
    } else if (s.code() == absl::StatusCode::kUnavailable) {
      MOE_LOG_INFO("operator: watch {} dropped: {}", options_.resource.DebugString(),
                   std::string(s.message()));
      metrics_->Restart("dropped");
      wait();
    } else if (s.code() == absl::StatusCode::kCancelled) {
      break;
    } else {
      MOE_LOG_WARN("operator: watch {}: {}", options_.resource.DebugString(), s.ToString());
      metrics_->Restart("error");
      need_list = true;
      wait();
    }
  }
}

}  // namespace moe::op::kube
