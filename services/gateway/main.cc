// `gateway`: flags -> GatewayOptions -> Validate -> tokenizer + backend (routers over gRPC) ->
// Gateway core -> HTTP server -> wait for SIGTERM/SIGINT -> drain (new generations get 503,
// in-flight ones finish within http.drain_timeout) -> stop. (The HTTP-path benchmark's gateway
// with a fake backend is bench/gateway/fake_gateway_main.cc.)
//
//   gateway --model DIR --router 127.0.0.1:50051 --port 0
//   gateway --config gateway.yaml --set limits.max_in_flight=256
#include <sys/resource.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/clock.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/config/loader.h"
#include "common/grpc/callback_queue_keeper.h"
#include "common/grpc/signals.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "common/tokenizer/tokenizer.h"
#include "services/gateway/core/gateway.h"
#include "services/gateway/grpc_backend.h"
#include "services/gateway/grpc_voice.h"
#include "services/gateway/http_server.h"
#include "services/gateway/thread_timer_queue.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.

const common::config::FlagAlias kAliases[] = {
    {"model", "model_dir"},        {"port", "http.port"}, {"host", "http.host"},
    {"router", "routing.routers"}, {"asr", "voice.asr"},  {"tts", "voice.tts"},
};

absl::Status Run(int argc, char** argv) {
  // The callback API (reactors, CallbackService) must not stall after a quiet second.
  common::rpc::KeepCallbackQueueAwake();
  // One descriptor per client connection: lift the soft limit (often 1024) to the hard one.
  rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  auto loaded = common::config::LoadServiceOptions<gateway::GatewayOptions>(argc, argv, kAliases);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  std::optional<gateway::GatewayOptions>& options = *loaded;
  common::SetLogLevel(options->log_level);

  auto tokenizer = tokenizer::Tokenizer::FromFile(options->model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  auto model = gateway::LoadModelInfo(*options);
  if (!model.ok()) return model.status();

  common::metrics::Registry registry;
  common::SystemClock& clock = common::SystemClock::Get();
  auto backend = gateway::GrpcBackend::Create(options->routing, model->id);
  if (!backend.ok()) return backend.status();
  // Voice: the asr and tts services (without targets the voice endpoints answer 503).
  auto asr = gateway::CreateGrpcAsrClient({.targets = options->voice.asr,
                                           .max_queued_bytes = options->voice.max_queued_bytes,
                                           .channel = options->voice.channel});
  if (!asr.ok()) return asr.status();
  auto tts = gateway::CreateGrpcTtsClient({.targets = options->voice.tts,
                                           .max_queued_bytes = options->voice.max_queued_bytes,
                                           .channel = options->voice.channel});
  if (!tts.ok()) return tts.status();
  gateway::ThreadTimerQueue timers(clock);
  auto gw = gateway::Gateway::Create(*options, *model,
                                     gateway::GatewayDeps{**tokenizer, **backend, clock, registry},
                                     gateway::GatewayVoiceDeps{**asr, **tts, timers});
  if (!gw.ok()) return gw.status();
  gateway::Gateway* core = gw->get();
  options->http.retry_after_s = options->limits.retry_after_s;
  auto server = gateway::ServeGateway(options->http, *core);
  if (!server.ok()) return server.status();
  // /metrics on its own port (the HTTP port then answers 404 for it).
  std::unique_ptr<common::metrics::MetricsServer> metrics_server;
  if (options->metrics.separate_port) {
    auto started = common::metrics::MetricsServer::Start(options->metrics.server(), registry);
    if (!started.ok()) return started.status();
    metrics_server = std::move(started).value();
  }
  common::PrintListeningLine(
      {.http = (*server)->port(),
       .metrics = metrics_server ? std::optional<int>(metrics_server->port()) : std::nullopt});
  MOE_LOG_INFO("gateway: serving {} (context {}) on http://{}:{}, {} router(s), {} asr, {} tts",
               model->id, model->max_model_len, options->http.host, (*server)->port(),
               options->routing.routers.size(), options->voice.asr.size(),
               options->voice.tts.size());

  const int signo = common::rpc::WaitForTerminationSignal();
  MOE_LOG_INFO("gateway: signal {}: draining {} request(s)", signo, core->in_flight());
  core->StartDrain();
  const absl::Time deadline = absl::Now() + options->http.drain_timeout;
  while (core->in_flight() > 0 && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (core->in_flight() > 0) {
    MOE_LOG_WARN("gateway: drain timeout; cancelling {} request(s)", core->in_flight());
  }
  (*server)->Stop();  // cancels what is left
  if (metrics_server) metrics_server->Stop();
  // Sessions hold the core: wait for their final callbacks before tearing down.
  const absl::Time hard = absl::Now() + absl::Seconds(5);
  while (core->in_flight() > 0 && absl::Now() < hard) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  MOE_LOG_INFO("gateway: stopped");
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return moe::common::rpc::ServiceMain("gateway", argc, argv, Run);
}
