// client-go's work queue semantics, reduced: a key is processed by one worker at a time; a key
// added while it is being processed is processed again once its worker is Done; AddAfter
// delays. Keys are "namespace/name" of MoEClusters.
//
// Thread-safety: thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace moe::op {

class WorkQueue {
 public:
  void Add(const std::string& key) { AddAt(key, absl::InfinitePast()); }
  void AddAfter(const std::string& key, absl::Duration d) { AddAt(key, absl::Now() + d); }
  // The next key due, blocking until one is; nullopt once ShutDown().
  std::optional<std::string> Get();
  // The worker is done with `key` (it may be handed out again).
  void Done(const std::string& key);
  void ShutDown();
  size_t size() const;

 private:
  void AddAt(const std::string& key, absl::Time when);

  mutable absl::Mutex mu_;
  std::map<std::string, absl::Time> pending_ ABSL_GUARDED_BY(mu_);  // key -> when due
  std::set<std::string> processing_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t version_ ABSL_GUARDED_BY(mu_) = 0;  // moves on every change
};

inline void WorkQueue::AddAt(const std::string& key, absl::Time when) {
  absl::MutexLock lock(&mu_);
  auto it = pending_.find(key);
  if (it == pending_.end() || when < it->second) pending_[key] = when;
  ++version_;
}

inline std::optional<std::string> WorkQueue::Get() {
  absl::MutexLock lock(&mu_);
  for (;;) {
    if (shut_down_) return std::nullopt;
    absl::Time next = absl::InfiniteFuture();
    const absl::Time now = absl::Now();
    for (const auto& [k, when] : pending_) {
      if (processing_.count(k)) continue;
      if (when <= now) {
        std::string key = k;
        pending_.erase(key);
        processing_.insert(key);
        return key;
      }
      next = std::min(next, when);
    }
    // Woken by any change, or when the earliest delayed key is due; the queue holds a
    // handful of clusters, so a re-scan is cheap.
    const uint64_t seen = version_;
    auto changed = [this, seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return version_ != seen; };
    mu_.AwaitWithDeadline(absl::Condition(&changed), next);
  }
}

inline void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mu_);
  processing_.erase(key);
  ++version_;
}

inline void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  ++version_;
}

inline size_t WorkQueue::size() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

}  // namespace moe::op
