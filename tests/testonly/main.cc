// moe_testonly_echo: the test-only Echo service process. The shape every service main follows:
// flags -> Options (YAML + --set) -> Validate -> metrics server + ServerRunner -> ready ->
// wait for SIGTERM/SIGINT -> drain -> exit 0. Exit 2: bad flags or config (nothing started);
// exit 1: startup failure (e.g. port in use).
#include <cstdio>
#include <iostream>

#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/config/loader.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/signals.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "tests/testonly/echo_service.h"

namespace moe::testonly {
namespace {

namespace config = common::config;
namespace rpc = common::rpc;
namespace metrics = common::metrics;

const config::FlagAlias kAliases[] = {{"grpc_port", "grpc.port"}, {"metrics_port", "metrics.port"}};

int Fail(int code, const absl::Status& status) {
  std::fprintf(stderr, "moe_testonly_echo: %s\n", std::string(status.message()).c_str());
  return code;
}

int Run(int argc, char** argv) {
  absl::StatusOr<config::CommandLine> cl = config::ParseCommandLine(argc, argv, kAliases);
  if (!cl.ok()) return Fail(2, cl.status());
  if (cl->help) {
    std::cout << "usage: moe_testonly_echo [--config FILE] [--set key=value]... [--grpc_port P]"
                 " [--metrics_port P] [--print_config]\nkeys:\n"
              << config::DescribeKeys<EchoServiceOptions>();
    return 0;
  }
  absl::StatusOr<EchoServiceOptions> options = config::LoadOptions<EchoServiceOptions>(*cl);
  if (!options.ok()) return Fail(2, options.status());
  if (absl::Status s = options->Validate(); !s.ok()) return Fail(2, s);
  if (cl->print_config) {
    std::cout << config::DumpYaml(*options);
    return 0;
  }
  common::SetLogLevel(options->log_level);

  metrics::Registry registry;
  EchoMetrics echo_metrics(registry);
  EchoService service(*options, echo_metrics);

  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> metrics_server =
      metrics::MetricsServer::Start(options->metrics, registry);
  if (!metrics_server.ok()) return Fail(1, metrics_server.status());
  rpc::ServerRunner runner(options->grpc);
  runner.AddService(&service, v1::Echo::service_full_name());
  if (absl::Status s = runner.Start(); !s.ok()) return Fail(1, s);
  runner.SetServing(true);  // Nothing to warm up.
  if (options->grpc.port == 0 || options->metrics.port == 0) {
    common::PrintListeningLine({.grpc = runner.port(), .metrics = (*metrics_server)->port()});
  }
  MOE_LOG_INFO("echo: serving gRPC on {}, metrics on {}", runner.port(), (*metrics_server)->port());

  const int signo = rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("echo: signal {}, draining", signo);
  runner.Shutdown();
  // Metrics stay up during the drain, so it can be watched.
  (*metrics_server)->Stop();
  MOE_LOG_INFO("echo: stopped");
  return 0;
}

}  // namespace
}  // namespace moe::testonly

int main(int argc, char** argv) {
  // Before any thread exists: threads inherit the mask, so only sigwait sees SIGTERM/SIGINT.
  moe::common::rpc::BlockTerminationSignals();
  return moe::testonly::Run(argc, argv);
}
