#include "services/gateway/core/api_keys.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/file.h"
#include "common/base/log.h"

namespace moe::gateway {
namespace {

int64_t StampOf(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return -2;
  return (static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec) ^
         (static_cast<int64_t>(st.st_size) << 1) ^ (static_cast<int64_t>(st.st_ino) << 20);
}

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("api key file line ", line, ": ", what));
}

absl::Status ParseOption(int line, absl::string_view option, ApiKey& key) {
  const size_t eq = option.find('=');
  if (eq == absl::string_view::npos) {
    return LineError(line, absl::StrCat("expected name=value, got \"", option, "\""));
  }
  const absl::string_view name = option.substr(0, eq);
  const absl::string_view value = option.substr(eq + 1);
  auto bad = [&] { return LineError(line, absl::StrCat("bad value for ", name)); };
  if (name == "name") {
    if (value.empty()) return bad();
    key.name = std::string(value);
  } else if (name == "rps") {
    if (!absl::SimpleAtod(value, &key.limits.rate_limit_rps) || key.limits.rate_limit_rps < 0) {
      return bad();
    }
  } else if (name == "burst") {
    if (!absl::SimpleAtod(value, &key.limits.rate_limit_burst) || key.limits.rate_limit_burst < 1) {
      return bad();
    }
  } else if (name == "concurrency") {
    if (!absl::SimpleAtoi(value, &key.limits.max_concurrency) || key.limits.max_concurrency < 0) {
      return bad();
    }
  } else if (name == "max_tokens") {
    if (!absl::SimpleAtoi(value, &key.limits.max_tokens) || key.limits.max_tokens < 0) {
      return bad();
    }
  } else if (name == "priority") {
    if (value != "true" && value != "false") return bad();
    key.limits.allow_priority = value == "true";
  } else {
    return LineError(line,
                     absl::StrCat("unknown option \"", name,
                                  "\" (name, rps, burst, concurrency, max_tokens, priority)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<ApiKey>> ParseApiKeyFile(std::string_view text) {
  std::vector<ApiKey> keys;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    ApiKey key;
    absl::StatusOr<common::SecretDigest> digest =
        common::ParseDigest(std::string_view(fields[0].data(), fields[0].size()));
    if (!digest.ok()) {
      // Never echo the field: it may be a key in plaintext.
      return LineError(line_no,
                       "not a sha256:<64 hex> digest (keys are stored hashed: `moe hash-key`)");
    }
    key.digest = *digest;
    key.name = absl::StrCat("key", line_no);
    for (size_t i = 1; i < fields.size(); ++i) {
      if (absl::Status s = ParseOption(line_no, fields[i], key); !s.ok()) return s;
    }
    for (const ApiKey& other : keys) {
      if (common::DigestEquals(other.digest, key.digest)) {
        return LineError(line_no, absl::StrCat("the same key as \"", other.name, "\""));
      }
      if (other.name == key.name) {
        return LineError(line_no, absl::StrCat("the name \"", key.name, "\" is used twice"));
      }
    }
    key.in_flight = std::make_shared<std::atomic<int32_t>>(0);
    keys.push_back(std::move(key));
  }
  if (keys.empty()) {
    return absl::InvalidArgumentError("api key file holds no key (auth would be off)");
  }
  return keys;
}

absl::StatusOr<std::unique_ptr<ApiKeyStore>> ApiKeyStore::Open(std::string path,
                                                               absl::Duration reload_interval,
                                                               common::Clock& clock) {
  const int64_t stamp = StampOf(path);
  absl::StatusOr<std::string> text = common::ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("auth.api_keys_file: cannot read \"", path, "\""));
  }
  absl::StatusOr<std::vector<ApiKey>> keys = ParseApiKeyFile(*text);
  if (!keys.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("auth.api_keys_file \"", path, "\": ", keys.status().message()));
  }
  std::unique_ptr<ApiKeyStore> store(new ApiKeyStore(std::move(path), reload_interval, clock));
  absl::MutexLock lock(&store->mu_);
  for (ApiKey& k : *keys) store->keys_.push_back(std::make_shared<const ApiKey>(std::move(k)));
  store->stamp_ = stamp;
  store->next_check_ = clock.Now() + reload_interval;
  return store;
}

std::unique_ptr<ApiKeyStore> ApiKeyStore::FromKeys(std::vector<ApiKey> keys, common::Clock& clock) {
  std::unique_ptr<ApiKeyStore> store(new ApiKeyStore("", absl::InfiniteDuration(), clock));
  absl::MutexLock lock(&store->mu_);
  for (ApiKey& k : keys) {
    if (k.in_flight == nullptr) k.in_flight = std::make_shared<std::atomic<int32_t>>(0);
    store->keys_.push_back(std::make_shared<const ApiKey>(std::move(k)));
  }
  store->next_check_ = absl::InfiniteFuture();
  return store;
}

void ApiKeyStore::MaybeReload() {
  if (path_.empty()) return;
  const absl::Time now = clock_.Now();
  {
    absl::MutexLock lock(&mu_);
    if (now < next_check_) return;
    next_check_ = now + reload_interval_;
  }
  const int64_t stamp = StampOf(path_);
  {
    absl::MutexLock lock(&mu_);
    if (stamp == stamp_) return;
  }
  absl::StatusOr<std::string> text = common::ReadFile(path_);
  absl::StatusOr<std::vector<ApiKey>> keys =
      text.ok() ? ParseApiKeyFile(*text) : absl::StatusOr<std::vector<ApiKey>>(text.status());
  if (!keys.ok()) {
    MOE_LOG_WARN("gateway: api key file \"{}\" not reloaded, keeping the last good one: {}", path_,
                 std::string(keys.status().message()));
    absl::MutexLock lock(&mu_);
    stamp_ = stamp;  // warn once per change
    return;
  }
  absl::MutexLock lock(&mu_);
  // Keys that stay keep their in-flight counts.
  std::vector<std::shared_ptr<const ApiKey>> next;
  for (ApiKey& k : *keys) {
    for (const auto& old : keys_) {
      if (common::DigestEquals(old->digest, k.digest)) k.in_flight = old->in_flight;
    }
    next.push_back(std::make_shared<const ApiKey>(std::move(k)));
  }
  MOE_LOG_INFO("gateway: api key file \"{}\" reloaded: {} keys (was {})", path_, next.size(),
               keys_.size());
  keys_ = std::move(next);
  stamp_ = stamp;
}

std::shared_ptr<const ApiKey> ApiKeyStore::Find(std::string_view presented) {
  MaybeReload();
  const common::SecretDigest digest = common::DigestOf(presented);
  std::shared_ptr<const ApiKey> found;
  absl::MutexLock lock(&mu_);
  for (const auto& k : keys_) {
    if (common::DigestEquals(k->digest, digest)) found = k;  // no early exit
  }
  return found;
}

size_t ApiKeyStore::size() {
  absl::MutexLock lock(&mu_);
  return keys_.size();
}

}  // namespace moe::gateway
