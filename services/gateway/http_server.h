// The gateway's HTTP/1.1 server: asynchronous Boost.Beast/Asio on a few I/O threads, keep-alive,
// Server-Sent-Event streaming (chunked transfer encoding), request body and header limits (413 /
// 431 with OpenAI-style error JSON), and client-disconnect detection that cancels the request's
// generation at once (a waiting read on the socket during handling sees the peer close).
//
// Every request goes to one handler (Gateway::Handle); the server never interprets paths.
// Beast is confined to http_server.cc (compile time).
//
// Thread-safety: port(), open_connections() and Stop() may be called from any thread. The
// handler runs on I/O threads; the ResponseWriter it gets may be used from any thread.
#pragma once

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "services/gateway/core/gateway_options.h"
#include "services/gateway/core/http_types.h"

namespace moe::gateway {

struct GatewayMetrics;

class HttpServer {
 public:
  using Handler = std::function<CancelFn(HttpRequest, std::shared_ptr<ResponseWriter>)>;

  // Binds options.host:options.port (0 = a free port) and starts options.io_threads threads.
  // kUnavailable when the address cannot be bound. `metrics` is borrowed and must outlive the
  // server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           Handler handler,
                                                           GatewayMetrics& metrics);
  virtual ~HttpServer() = default;

  virtual int port() const = 0;
  virtual int64_t open_connections() const = 0;
  // Stops accepting, closes every connection (cancelling requests in flight) and joins the I/O
  // threads. Idempotent. For a graceful drain, let in-flight requests finish first.
  virtual void Stop() = 0;
};

}  // namespace moe::gateway
