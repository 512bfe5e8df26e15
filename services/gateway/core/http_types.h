// Transport-neutral HTTP request/response types between the gateway core and its HTTP server.
// The server (http_server.h) parses the wire; the core (gateway.h) never sees a socket.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace moe::gateway {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // path and query, e.g. "/v1/models"
  std::string authorization;  // the Authorization header, "" when absent
  std::string client;         // remote address ("127.0.0.1"), for per-client rate limits
  std::string body;
  std::string request_id;  // the x-request-id header, "" when absent (core/request_id.h)
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra headers (Retry-After, ...)
};

// Where the core writes one request's answer. Either Send() once, or StartStream() once, then
// Write()* and End() once (Server-Sent Events: each Write is framed text such as
// "data: {...}\n\n").
//
// Thread-safety: every method may be called from any thread (the backend's threads included);
// calls for one request are made in order (never concurrently). After the client has gone, calls
// are accepted and dropped.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;
  virtual void Send(HttpResponse response) = 0;
  virtual void StartStream(int status, HttpHeaders headers) = 0;
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;
};

// Returned by the core for a request still in progress: the server calls it (once, any thread)
// when the client disconnects, so the core cancels the generation at once. Empty when the request
// was answered synchronously.
using CancelFn = std::function<void()>;

}  // namespace moe::gateway
