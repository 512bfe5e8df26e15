// The bearer token a /metrics scrape may have to present (`metrics.bearer_token_file`, the same
// key in every service). Only the token's SHA-256 is kept (common/base/secret.h); a presented
// token is compared in constant time, and neither is ever logged. The file is read once, at
// start: a rotated token takes a restart.
//
// Used by MetricsServer (every service's metrics port) and by the gateway's HTTP port when it
// serves /metrics there.
//
// Thread-safety: const methods may be called from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "common/base/secret.h"

namespace moe::common::metrics {

class MetricsAuth {
 public:
  // Open: every scrape is served.
  MetricsAuth() = default;
  // `path` empty: open. kNotFound when the file cannot be read, kInvalidArgument when it holds
  // only whitespace (neither message contains the file's contents).
  static absl::StatusOr<MetricsAuth> FromFile(const std::string& path);

  bool required() const { return digest_.has_value(); }
  // Whether a request with this Authorization header value ("" when absent) may scrape:
  // always when open, else only "Bearer <token>" with the file's token.
  bool Allows(std::string_view authorization) const;

 private:
  std::optional<SecretDigest> digest_;
};

}  // namespace moe::common::metrics
