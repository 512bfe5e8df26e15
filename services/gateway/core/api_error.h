// OpenAI-style API errors: {"error": {"message", "type", "param", "code"}} with an HTTP status.
//
//   400 invalid_request_error (param names the offending field), 401 invalid_api_key,
//   403 permission_denied,
//   404 model_not_found, 413 request_too_large, 429 rate_limit_exceeded (+ Retry-After),
//   503 overloaded / draining (+ Retry-After), 500 server_error.
// A size the client controls past a configured limit (LimitExceeded): 400 limit_exceeded (413
// request_too_large for bodies, 431 for headers), `param` the field, the message naming the
// option and its value ("... (limit: limits.max_stop_strings = 16)").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "services/gateway/core/http_types.h"

namespace moe::gateway {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::optional<std::string> param;  // JSON null when unset
  std::optional<std::string> code;   // JSON null when unset
  int retry_after_s = 0;             // > 0: a Retry-After header (429, 503)

  // The error JSON object {"error": {...}} as text.
  std::string ToJson() const;
  // A complete HTTP response carrying ToJson() (and Retry-After when set).
  HttpResponse ToResponse() const;

  static ApiError InvalidParam(std::string param, std::string message);
  static ApiError InvalidRequest(std::string message);
  static ApiError ModelNotFound(const std::string& model);
  static ApiError NotFound(const std::string& what);
  static ApiError MethodNotAllowed(const std::string& method, const std::string& path);
  static ApiError Unauthorized(std::string message);
  // 403: an authenticated key asks for something it may not (a request `priority`).
  static ApiError Forbidden(std::string param, std::string message);
  static ApiError TooLarge(std::string message);
  // A client-controlled size past the option `option` (its value `limit`): 400 limit_exceeded,
  // `param` the field (empty: JSON null). The message ends "(limit: <option> = <limit>)".
  static ApiError LimitExceeded(std::string param, const std::string& option, int64_t limit,
                                const std::string& message);
  // The same with the limit as text ("1s", a duration).
  static ApiError LimitExceeded(std::string param, const std::string& option,
                                const std::string& limit, const std::string& message);
  static ApiError RateLimited(int retry_after_s);
  static ApiError Overloaded(std::string message, int retry_after_s);
  static ApiError Internal(std::string message);
  // From a backend/core status: INVALID_ARGUMENT/FAILED_PRECONDITION/OUT_OF_RANGE 400,
  // NOT_FOUND 404, RESOURCE_EXHAUSTED/UNAVAILABLE 503 (Retry-After), DEADLINE_EXCEEDED 504,
  // CANCELLED 499, anything else 500.
  static ApiError FromStatus(const absl::Status& status, int retry_after_s = 1);
};

}  // namespace moe::gateway
