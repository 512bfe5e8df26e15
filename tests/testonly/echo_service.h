// The test-only Echo service: options, metrics and the gRPC handler. Not a product service; it
// stands in for one to exercise main()'s shape (flags -> Options -> Validate -> ServerRunner +
// metrics -> SIGTERM -> drain) in tests/testonly/echo_process_test.cc.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "tests/testonly/echo.grpc.pb.h"

namespace moe::testonly {

struct EchoServiceOptions {
  common::rpc::ServerOptions grpc;                // gRPC server (port, drain, TLS).
  common::metrics::MetricsServerOptions metrics;  // /metrics and /healthz.
  std::string prefix;                             // Prepended to every reply.
  int max_message_bytes = 4096;                   // Longer messages get INVALID_ARGUMENT.
  absl::Duration max_delay = absl::Seconds(5);    // Longest delay_ms a request may ask for.
  std::string log_level = "info";                 // trace|debug|info|warn|error|off.

  static void Describe(common::config::Schema<EchoServiceOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

struct EchoMetrics {
  explicit EchoMetrics(common::metrics::Registry& registry);
  common::metrics::Counter& requests_total;  // Echo calls answered OK.
  common::metrics::Counter& rejected_total;  // Echo calls refused (INVALID_ARGUMENT).
  common::metrics::Gauge& in_flight;         // Echo calls being handled now.
};

// Thread-safe: handlers run on gRPC's threads. `metrics` must outlive the service.
class EchoService final : public moe::testonly::v1::Echo::Service {
 public:
  EchoService(const EchoServiceOptions& options, EchoMetrics& metrics)
      : options_(options), metrics_(metrics) {}

  // moe::testonly::v1::Echo::Service
  ::grpc::Status Echo(::grpc::ServerContext* context, const v1::EchoRequest* request,
                      v1::EchoResponse* response) override;

 private:
  const EchoServiceOptions options_;
  EchoMetrics& metrics_;
};

}  // namespace moe::testonly
