#include "common/metrics/metrics_server.h"

#include <sys/socket.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metrics/metrics_auth.h"
#include "httplib.h"

namespace moe::common::metrics {

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, const Registry& registry, HealthCheck healthy) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<MetricsAuth> auth = MetricsAuth::FromFile(options.bearer_token_file);
  if (!auth.ok()) return auth.status();
  auto server = std::make_unique<httplib::Server>();
  // One request per connection: an idle keep-alive connection would hold Stop() for the
  // keep-alive timeout. Scrapes are seconds apart, so the extra handshake costs nothing.
  server->set_keep_alive_max_count(1);
  server->set_keep_alive_timeout(1);
  server->set_read_timeout(5, 0);
  // httplib's default sets SO_REUSEPORT, which lets a second process bind the same port and
  // silently take half the scrapes. SO_REUSEADDR alone still allows a quick restart.
  server->set_socket_options([](int sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  server->Get("/metrics", [&registry, auth = *std::move(auth)](const httplib::Request& req,
                                                               httplib::Response& res) {
    if (!auth.Allows(req.get_header_value("Authorization"))) {
      res.status = 401;
      res.set_header("WWW-Authenticate", "Bearer");
      res.set_content("a bearer token is required (metrics.bearer_token_file)\n", "text/plain");
      return;
    }
    res.set_content(registry.TextExposition(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server->Get("/healthz",
              [healthy = std::move(healthy)](const httplib::Request&, httplib::Response& res) {
                const bool ok = !healthy || healthy();
                res.status = ok ? 200 : 503;
                res.set_content(ok ? "ok\n" : "unhealthy\n", "text/plain");
              });

  int port = options.port;
  if (port == 0) {
    port = server->bind_to_any_port(options.host);
    if (port < 0) {
      return absl::UnavailableError(absl::StrCat("metrics: cannot bind ", options.host, ":0"));
    }
  } else if (!server->bind_to_port(options.host, port)) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot bind ", options.host, ":", port, " (in use?)"));
  }
  auto out = std::unique_ptr<MetricsServer>(new MetricsServer(std::move(server), port));
  out->thread_ = std::thread([s = out->server_.get(), done = &out->listen_returned_] {
    s->listen_after_bind();
    done->store(true);
  });
  // httplib's stop() is a no-op until the listen loop runs, so a Stop() right after Start()
  // could miss it and hang the join. The loop starts within microseconds.
  while (!out->server_->is_running() && !out->listen_returned_.load()) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return out;
}

MetricsServer::MetricsServer(std::unique_ptr<httplib::Server> server, int port)
    : server_(std::move(server)), port_(port) {}

MetricsServer::~MetricsServer() { Stop(); }

void MetricsServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace moe::common::metrics
