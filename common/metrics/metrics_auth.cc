#include "common/metrics/metrics_auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/file.h"

namespace moe::common::metrics {

absl::StatusOr<MetricsAuth> MetricsAuth::FromFile(const std::string& path) {
  MetricsAuth auth;
  if (path.empty()) return auth;
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat("metrics.bearer_token_file \"", path, "\": cannot read"));
  }
  const absl::string_view token = absl::StripAsciiWhitespace(*text);
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics.bearer_token_file \"", path, "\" is empty"));
  }
  auth.digest_ = DigestOf(std::string_view(token.data(), token.size()));
  return auth;
}

bool MetricsAuth::Allows(std::string_view authorization) const {
  if (!digest_) return true;
  const absl::string_view value(authorization.data(), authorization.size());
  if (value.size() < 7 || !absl::EqualsIgnoreCase(value.substr(0, 7), "Bearer ")) return false;
  const absl::string_view token = absl::StripAsciiWhitespace(value.substr(7));
  if (token.empty()) return false;
  return DigestEquals(DigestOf(std::string_view(token.data(), token.size())), *digest_);
}

}  // namespace moe::common::metrics
