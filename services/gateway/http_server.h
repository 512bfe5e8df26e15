// The gateway's HTTP/1.1 server: asynchronous Boost.Beast/Asio on a few I/O threads, keep-alive,
// streaming (chunked transfer encoding: Server-Sent Events, or audio), request body and header
// limits (413 / 431 with OpenAI-style error JSON; multipart uploads have their own, larger
// limit, applied once the headers are read), client-disconnect detection that cancels the
// request's generation at once (a waiting read on the socket during handling sees the peer
// close), and WebSocket upgrades (RFC 6455, for the realtime API): bounded messages in, a
// bounded send queue out.
//
// Every request goes to one handler (Gateway::Handle), every upgrade request to the other
// (Gateway::Upgrade); the server never interprets paths. Beast is confined to http_server.cc
// (compile time).
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
class Gateway;

class HttpServer {
 public:
  using Handler = std::function<CancelFn(HttpRequest, std::shared_ptr<ResponseWriter>)>;
  // An upgrade request and the writer of the WebSocket it would become.
  using UpgradeHandler =
      std::function<UpgradeResult(const HttpRequest&, std::shared_ptr<WebSocketWriter>)>;

  // Binds options.host:options.port (0 = a free port) and starts options.io_threads threads.
  // kUnavailable when the address cannot be bound. `metrics` is borrowed and must outlive the
  // server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           Handler handler,
                                                           GatewayMetrics& metrics);
  // Also serves WebSocket upgrades with `upgrade` (without one, an upgrade request is a plain
  // request for `handler`).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           Handler handler, UpgradeHandler upgrade,
                                                           GatewayMetrics& metrics);
  virtual ~HttpServer() = default;

  virtual int port() const = 0;
  // HTTP connections and WebSockets.
  virtual int64_t open_connections() const = 0;
  // Stops accepting, closes every connection (cancelling requests in flight) and joins the I/O
  // threads. Idempotent. For a graceful drain, let in-flight requests finish first.
  virtual void Stop() = 0;
};

// Serves `gateway` over HTTP: every request to Gateway::Handle, every upgrade to
// Gateway::Upgrade, its metrics. The one wiring of the gateway binary, the fake gateway, the HTTP
// fuzzer and the tests. `gateway` must outlive the server.
absl::StatusOr<std::unique_ptr<HttpServer>> ServeGateway(const HttpOptions& options,
                                                         Gateway& gateway);

}  // namespace moe::gateway
