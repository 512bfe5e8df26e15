// Transport-neutral HTTP request/response types between the gateway core and its HTTP server.
// The server (http_server.h) parses the wire; the core (gateway.h) never sees a socket.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
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
  // Every header, names in lower case, in arrival order (content-type for multipart uploads,
  // openai-beta for the realtime protocol's flavour).
  HttpHeaders headers;

  // The first value of header `lower_name`, "" when absent.
  std::string Header(std::string_view lower_name) const {
    for (const auto& [k, v] : headers) {
      if (k == lower_name) return v;
    }
    return "";
  }
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra headers (Retry-After, ...)
};

// Where the core writes one request's answer. Either Send() once, or StartStream() once, then
// Write()* and End() once (chunked transfer encoding; Server-Sent Events unless the headers
// name another Content-Type, e.g. audio/mpeg: each Write is then raw body bytes).
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
  // Runs `fn` once (any thread) when the response's bytes have all left for the socket, or when
  // the connection is gone: a client that reads slowly holds what `fn` releases (the in-flight
  // slot) until then. Call it after Send() or End(). The default runs it at once.
  virtual void WhenFlushed(std::function<void()> fn) { fn(); }
  // Flow control for a stream: runs `fn` once (any thread) when the response's unsent bytes are
  // at most http.stream_read_pause_bytes (at once when they already are), or when the
  // connection is gone. Takes effect after the Write()s made before it. A session calls it
  // before asking its backend for more, so that a client that stops reading stops the router
  // stream being read instead of filling the gateway's buffer. The default runs it at once.
  virtual void WhenWritable(std::function<void()> fn) { fn(); }
};

// Returned by the core for a request still in progress: the server calls it (once, any thread)
// when the client disconnects, so the core cancels the generation at once. Empty when the request
// was answered synchronously.
using CancelFn = std::function<void()>;

// --- WebSocket (RFC 6455), for the realtime API ---

// Where the core writes one WebSocket's messages. Thread-safety: any thread; messages go out
// in call order. After the peer has gone, calls are accepted and dropped.
class WebSocketWriter {
 public:
  virtual ~WebSocketWriter() = default;
  // One text message.
  virtual void SendText(std::string message) = 0;
  // A close frame with `code` (1000 normal, 1008 policy, 1011 server error) and `reason`
  // (at most 123 bytes); nothing is sent after it.
  virtual void Close(uint16_t code, std::string reason) = 0;
};

// What the core does with one WebSocket's input. Calls are serialised (the socket's reader);
// OnClosed() comes once, last, however the socket ended.
class WebSocketHandler {
 public:
  virtual ~WebSocketHandler() = default;
  virtual void OnText(std::string message) = 0;
  // A binary message (the realtime API has none): the handler answers it as it sees fit.
  virtual void OnBinary(std::string message) = 0;
  virtual void OnClosed() = 0;
};

// The core's answer to an upgrade request: a handler (the server then completes the handshake
// and reads messages into it) or, when `handler` is null, `rejection` is sent as the HTTP
// answer (401, 404, 503...).
struct UpgradeResult {
  std::shared_ptr<WebSocketHandler> handler;
  HttpResponse rejection;
  // The Sec-WebSocket-Protocol to answer with ("" = none): one the client offered.
  std::string subprotocol;
};

}  // namespace moe::gateway
