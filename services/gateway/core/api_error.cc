#include "services/gateway/core/api_error.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {

std::string ApiError::ToJson() const {
  nlohmann::json error = {{"message", message}, {"type", type}};
  error["param"] = param ? nlohmann::json(*param) : nlohmann::json(nullptr);
  error["code"] = code ? nlohmann::json(*code) : nlohmann::json(nullptr);
  return nlohmann::json{{"error", std::move(error)}}.dump(-1, ' ', false,
                                                          nlohmann::json::error_handler_t::replace);
}

HttpResponse ApiError::ToResponse() const {
  HttpResponse response;
  response.status = http_status;
  response.body = ToJson();
  if (retry_after_s > 0) response.headers.emplace_back("Retry-After", absl::StrCat(retry_after_s));
  return response;
}

ApiError ApiError::InvalidParam(std::string param, std::string message) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

ApiError ApiError::InvalidRequest(std::string message) {
  ApiError e;
  e.message = std::move(message);
  return e;
}

ApiError ApiError::ModelNotFound(const std::string& model) {
  ApiError e;
  e.http_status = 404;
  e.message = absl::StrCat("The model `", model, "` does not exist.");
  e.param = "model";
  e.code = "model_not_found";
  return e;
}

ApiError ApiError::NotFound(const std::string& what) {
  ApiError e;
  e.http_status = 404;
  e.message = absl::StrCat("Not found: ", what);
  e.code = "not_found";
  return e;
}

ApiError ApiError::MethodNotAllowed(const std::string& method, const std::string& path) {
  ApiError e;
  e.http_status = 405;
  e.message = absl::StrCat("Method ", method, " is not allowed on ", path);
  e.code = "method_not_allowed";
  return e;
}

ApiError ApiError::Forbidden(std::string param, std::string message) {
  ApiError e;
  e.http_status = 403;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = "permission_denied";
  return e;
}

ApiError ApiError::Unauthorized(std::string message) {
  ApiError e;
  e.http_status = 401;
  e.message = std::move(message);
  e.code = "invalid_api_key";
  return e;
}

ApiError ApiError::TooLarge(std::string message) {
  ApiError e;
  e.http_status = 413;
  e.message = std::move(message);
  e.code = "request_too_large";
  return e;
}

ApiError ApiError::LimitExceeded(std::string param, const std::string& option, int64_t limit,
                                 const std::string& message) {
  return LimitExceeded(std::move(param), option, absl::StrCat(limit), message);
}

ApiError ApiError::LimitExceeded(std::string param, const std::string& option,
                                 const std::string& limit, const std::string& message) {
  ApiError e;
  e.message = absl::StrCat(message, " (limit: ", option, " = ", limit, ")");
  if (!param.empty()) e.param = std::move(param);
  e.code = "limit_exceeded";
  return e;
}

ApiError ApiError::RateLimited(int retry_after_s) {
  ApiError e;
  e.http_status = 429;
  e.message = absl::StrCat("Rate limit reached; retry after ", retry_after_s, " s.");
  e.type = "requests";
  e.code = "rate_limit_exceeded";
  e.retry_after_s = retry_after_s;
  return e;
}

ApiError ApiError::Overloaded(std::string message, int retry_after_s) {
  ApiError e;
  e.http_status = 503;
  e.message = std::move(message);
  e.type = "server_error";
  e.code = "overloaded";
  e.retry_after_s = retry_after_s;
  return e;
}

ApiError ApiError::Internal(std::string message) {
  ApiError e;
  e.http_status = 500;
  e.message = std::move(message);
  e.type = "server_error";
  return e;
}

ApiError ApiError::FromStatus(const absl::Status& status, int retry_after_s) {
  std::string message(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return InvalidRequest(std::move(message));
    case absl::StatusCode::kNotFound: {
      ApiError e = InvalidRequest(std::move(message));
      e.http_status = 404;
      return e;
    }
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
      return Overloaded(std::move(message), retry_after_s);
    case absl::StatusCode::kDeadlineExceeded: {
      ApiError e = Internal(std::move(message));
      e.http_status = 504;
      e.code = "timeout";
      return e;
    }
    case absl::StatusCode::kCancelled: {
      ApiError e = Internal(std::move(message));
      e.http_status = 499;
      e.code = "cancelled";
      return e;
    }
    default:
      return Internal(std::move(message));
  }
}

}  // namespace moe::gateway
