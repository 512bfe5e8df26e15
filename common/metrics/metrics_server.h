// A small HTTP server on its own port: GET /metrics (Prometheus text format 0.0.4 of a Registry)
// and GET /healthz (liveness: 200 "ok", or 503 when the health callback says so). With
// `bearer_token_file` set, /metrics answers 401 (WWW-Authenticate: Bearer) unless the scrape
// presents `Authorization: Bearer <token>` (metrics_auth.h); /healthz stays open for probes.
//
// Served with cpp-httplib rather than prometheus-cpp's civetweb Exposer, whose stop takes ~2 s:
// Stop() here returns in milliseconds. Connections are not kept alive (one request each), so an
// idle scraper never delays Stop().
//
// Thread-safety: port() and Stop() may be called from any thread. Handlers run on the server's
// own threads; the Registry and the health callback must be thread-safe and outlive the server.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/config/schema.h"
#include "common/metrics/registry.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace moe::common::metrics {

struct MetricsServerOptions {
  // Address to bind. "0.0.0.0" serves scrapers from other pods; tests use "127.0.0.1".
  std::string host = "0.0.0.0";
  // TCP port; 0 picks a free port (read it with port(), and it goes into the "listening" line).
  int port = 0;
  // A file holding the token scrapes must present as "Authorization: Bearer <token>"; empty =
  // /metrics is open (Prometheus' `authorization: {credentials_file: ...}` sends it).
  std::string bearer_token_file;

  static void Describe(config::Schema<MetricsServerOptions>& s) {
    s.Add("host", &MetricsServerOptions::host, "address to bind").NonEmpty();
    s.Add("port", &MetricsServerOptions::port, "metrics port; 0 picks a free one").Range(0, 65535);
    s.Add("bearer_token_file", &MetricsServerOptions::bearer_token_file,
          "token file /metrics scrapes must present as a bearer token; empty = open");
  }
  absl::Status Validate() const { return config::CheckFields(*this); }
};

class MetricsServer {
 public:
  // Returns true while the process is healthy; /healthz answers 503 when it returns false.
  using HealthCheck = std::function<bool()>;

  // Binds and starts serving. kUnavailable when the address cannot be bound (port in use);
  // kInvalidArgument for invalid options; kNotFound for a token file that cannot be read. `healthy`
  // may be empty (always healthy).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options,
                                                              const Registry& registry,
                                                              HealthCheck healthy = nullptr);
  // Stops serving and joins the server thread.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // The bound port (the chosen one when options.port was 0).
  int port() const { return port_; }
  // Stops accepting, finishes the requests in flight, joins. Idempotent.
  void Stop();

 private:
  MetricsServer(std::unique_ptr<httplib::Server> server, int port);

  const std::unique_ptr<httplib::Server> server_;
  const int port_;
  std::atomic<bool> listen_returned_{false};
  std::mutex stop_mu_;  // Serialises Stop(); guards the join of thread_.
  std::thread thread_;
};

}  // namespace moe::common::metrics
