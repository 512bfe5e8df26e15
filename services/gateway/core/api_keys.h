// API keys: several, stored hashed, compared in constant time, reloaded without a restart, each
// with its own limits.
//
// The key file (auth.api_keys_file; the Helm chart mounts it from a Secret) has one key a line:
//
//   # digest (moe hash-key)                                                  options
//   sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08  name=team-a rps=5
//   burst=10 sha256:60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752  name=ops
//   concurrency=4 priority=true
//
// Options: name (in logs and metrics; default "key<line>"), rps and burst (the key's token
// bucket; default the gateway's limits.rate_limit_*), concurrency (generations in flight for the
// key; 0 = only the gateway's bound), max_tokens (the most a request of the key may ask for;
// 0 = no extra cap), priority (true: the key may set the request `priority`, which the router
// schedules by; others get 403 for a non-zero priority). A line that is not a digest is an
// error that names the line, never its text (it may be a key pasted in plaintext).
//
// The file is checked for a change at most every reload_interval; a new version replaces the
// table atomically (a file that fails to parse keeps the last good table, and says why in the
// log). A key removed from the file stops working at the next check.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/secret.h"

namespace moe::gateway {

struct ApiKeyLimits {
  double rate_limit_rps = -1;    // < 0: the gateway's default
  double rate_limit_burst = -1;  // < 0: the gateway's default
  int32_t max_concurrency = 0;   // 0: no per-key bound
  int32_t max_tokens = 0;        // 0: no per-key cap
  bool allow_priority = false;
};

struct ApiKey {
  std::string name;
  common::SecretDigest digest;
  ApiKeyLimits limits;
  // Generations in flight for this key (shared by the versions of a reloaded table, so a
  // reload does not reset it).
  std::shared_ptr<std::atomic<int32_t>> in_flight;
};

// Parses a key file's text. kInvalidArgument naming the line for a bad line; an empty table
// is an error too (auth would silently be off).
absl::StatusOr<std::vector<ApiKey>> ParseApiKeyFile(std::string_view text);

class ApiKeyStore {
 public:
  // Reads `path` now (errors: kNotFound, kInvalidArgument as ParseApiKeyFile).
  static absl::StatusOr<std::unique_ptr<ApiKeyStore>> Open(std::string path,
                                                           absl::Duration reload_interval,
                                                           common::Clock& clock);
  // A fixed table (tests, and digests given inline in the config).
  static std::unique_ptr<ApiKeyStore> FromKeys(std::vector<ApiKey> keys, common::Clock& clock);

  // The key whose digest matches `presented` (the Bearer value), or null. Hashes once and
  // compares with every key, each comparison in constant time, without an early exit.
  std::shared_ptr<const ApiKey> Find(std::string_view presented);

  size_t size();

 private:
  ApiKeyStore(std::string path, absl::Duration reload_interval, common::Clock& clock)
      : path_(std::move(path)), reload_interval_(reload_interval), clock_(clock) {}
  void MaybeReload() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string path_;  // empty: fixed table
  const absl::Duration reload_interval_;
  common::Clock& clock_;
  absl::Mutex mu_;
  std::vector<std::shared_ptr<const ApiKey>> keys_ ABSL_GUARDED_BY(mu_);
  int64_t stamp_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Time next_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace moe::gateway
