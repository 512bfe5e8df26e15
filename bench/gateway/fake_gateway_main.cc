// `moe_bench_fake_gateway`: the gateway's HTTP path (the real Gateway core and HTTP server) in
// front of the fake backend (services/gateway/testing/fake_backend.h: no model, no router, a
// scripted token stream), for `moe bench gateway`'s held-streams and requests/s figures. Not a
// product binary: the production `gateway` links no fakes.
//
//   moe_bench_fake_gateway --set model_dir=DIR --set http.port=0 --set token_interval=20ms
//
// Keys: model_dir, log_level, token_interval, and the gateway's http.* and limits.* sections
// (`--help` lists them). Prints the listening line; SIGTERM/SIGINT stop it (exit 0).
#include <sys/resource.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/base/listening_line.h"
#include "common/base/log.h"
#include "common/config/loader.h"
#include "common/grpc/signals.h"
#include "common/metrics/registry.h"
#include "common/tokenizer/tokenizer.h"
#include "services/gateway/core/gateway.h"
#include "services/gateway/core/gateway_options.h"
#include "services/gateway/http_server.h"
#include "services/gateway/testing/fake_backend.h"

namespace {

using namespace moe;  // NOLINT: a main's wiring reads better without the prefixes.
namespace config = common::config;

struct FakeGatewayOptions {
  std::string model_dir;  // tokenizer.json, config.json (the fake backend runs no model)
  std::string log_level = "info";
  absl::Duration token_interval = absl::ZeroDuration();  // pause between a stream's tokens
  gateway::HttpOptions http;
  gateway::LimitOptions limits;

  static void Describe(config::Schema<FakeGatewayOptions>& s) {
    s.Add("model_dir", &FakeGatewayOptions::model_dir, "model directory (tokenizer, config.json)")
        .NonEmpty();
    s.Add("log_level", &FakeGatewayOptions::log_level, "trace|debug|info|warn|error|off");
    s.Add("token_interval", &FakeGatewayOptions::token_interval, "pause between tokens")
        .Min(absl::ZeroDuration());
    s.Section("http", &FakeGatewayOptions::http);
    s.Section("limits", &FakeGatewayOptions::limits);
  }
  absl::Status Validate() const { return config::CheckFields(*this); }
};

absl::Status Run(int argc, char** argv) {
  // One descriptor per client connection: lift the soft limit (often 1024) to the hard one.
  rlimit files;
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
  auto loaded = config::LoadServiceOptions<FakeGatewayOptions>(argc, argv);
  if (!loaded.ok()) return loaded.status();
  if (!loaded->has_value()) return absl::OkStatus();  // --help / --print_config answered
  const FakeGatewayOptions& fake = **loaded;
  common::SetLogLevel(fake.log_level);
  gateway::GatewayOptions options;
  options.model_dir = fake.model_dir;
  options.log_level = fake.log_level;
  options.http = fake.http;
  options.limits = fake.limits;

  auto tokenizer = tokenizer::Tokenizer::FromFile(options.model_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  auto model = gateway::LoadModelInfo(options);
  if (!model.ok()) return model.status();
  common::metrics::Registry registry;
  gateway::testing::FakeBackend backend(
      {.token_interval = fake.token_interval, .eos_id = (*tokenizer)->eos_id()});
  auto gw = gateway::Gateway::Create(
      options, *model,
      gateway::GatewayDeps{**tokenizer, backend, common::SystemClock::Get(), registry});
  if (!gw.ok()) return gw.status();
  gateway::Gateway* core = gw->get();
  auto server = gateway::ServeGateway(options.http, *core);
  if (!server.ok()) return server.status();
  common::PrintListeningLine({.http = (*server)->port()});
  MOE_LOG_INFO("fake gateway: serving {} on http://{}:{}, {} between tokens", model->id,
               options.http.host, (*server)->port(), absl::FormatDuration(fake.token_interval));

  common::rpc::WaitForTerminationSignal();
  // A benchmark tool: no drain. Sessions hold the core: wait for their final callbacks (the
  // stop cancels them) before tearing it down.
  (*server)->Stop();
  const absl::Time hard = absl::Now() + absl::Seconds(5);
  while (core->in_flight() > 0 && absl::Now() < hard) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  return moe::common::rpc::ServiceMain("moe_bench_fake_gateway", argc, argv, Run);
}
