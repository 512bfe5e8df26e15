// `moe up [--model DIR] [--config FILE] [--port N] [--set key=value]`: the main job. Makes the
// default model when it is missing (the `small` preset in <repo>/.models/small; ensure_model.h),
// starts the local cluster as separate processes on loopback in the order of Topology()
// (up_topology.h: expert workers, routers, asr, tts, then the gateway), waits until every process
// is ready, prints the gateway URL and a curl example, and on Ctrl-C (SIGINT/SIGTERM) stops
// everything: the gateway first (it drains), then the rest. A process that exits on its own
// stops the cluster too (exit 1).
//
// Options and the topology file: up_options.h (`moe up --help` lists every key). Progress goes
// to stderr, with the services' own output; stdout gets the URL and the curl example, then one
// JSON line {"event":"ready","url":...,"model":...,"services":[{"name":"router-0",
// "service":"router","grpc":P,"metrics":M}, ...]} for scripts; with `security` on, a
// "security" object names the files a client needs (dir, ca, certs.<kind>.{cert,key},
// token_files.<role>, api_keys_file, api_key_file: paths only, never a secret; up_security.h).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config/loader.h"
#include "common/grpc/signals.h"
#include "common/process/supervisor.h"
#include "nlohmann/json.hpp"
#include "tools/moe/command.h"
#include "tools/moe/ensure_model.h"
#include "tools/moe/up_options.h"
#include "tools/moe/up_security.h"
#include "tools/moe/up_topology.h"

#ifndef MOE_SOURCE_DIR
#define MOE_SOURCE_DIR "."
#endif

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
namespace config = common::config;
using common::process::Supervisor;

void Progress(const std::string& msg) {
  std::fprintf(stderr, "moe up: %s\n", msg.c_str());
  std::fflush(stderr);
}

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

// Routed experts per MoE layer, from config.json (0 when it says none).
int NumExperts(const std::string& model_dir) {
  std::ifstream in(fs::path(model_dir) / "config.json");
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return 0;
  return config.value("num_local_experts", config.value("num_experts", 0));
}

// The files a client of the secure cluster needs (paths only).
nlohmann::json SecurityJson(const ClusterSecurity& s) {
  nlohmann::json j = {{"dir", s.dir}, {"mtls", s.options.mtls}, {"auth", s.options.auth}};
  if (s.options.mtls) {
    j["ca"] = s.ca_file;
    nlohmann::json certs = nlohmann::json::object();
    for (const std::string& kind : CertifiedKinds()) {
      certs[kind] = {{"cert", s.CertFile(kind)}, {"key", s.KeyFile(kind)}};
    }
    j["certs"] = std::move(certs);
  }
  if (s.options.UseTokens()) {
    j["token_files"] = {{"gateway", s.TokenFile("gateway")},
                        {"router", s.TokenFile("router")},
                        {"admin", s.TokenFile("admin")}};
  }
  if (!s.api_keys_file.empty()) j["api_keys_file"] = s.api_keys_file;
  if (!s.api_key_file.empty()) j["api_key_file"] = s.api_key_file;
  return j;
}

// Starts every process of the topology up to its listening line, then waits until each is
// ready (all within options.ready_timeout of `start`).
absl::Status StartCluster(UpContext& c, Supervisor& group, const std::string& bin_dir,
                          absl::Time start) {
  std::vector<const ServiceSpec*> spec_of;  // per member of `group`
  for (const ServiceSpec& spec : Topology()) {
    const ServiceOptions& service = c.options.*spec.options;
    for (int i = 0; i < service.replicas; ++i) {
      const std::string name = absl::StrCat(spec.name, "-", i);
      const std::string binary = (fs::path(bin_dir) / spec.binary).string();
      if (!fs::exists(binary)) {
        return absl::NotFoundError(absl::StrCat(binary, " is not built (ninja ", spec.binary, ")"));
      }
      std::vector<std::string> argv = {binary};
      for (std::string& flag : spec.flags(c, i)) argv.push_back(std::move(flag));
      argv.insert(argv.end(), service.args.begin(), service.args.end());
      Progress(absl::StrCat("starting ", name, "..."));
      absl::StatusOr<const Supervisor::Member*> member =
          group.Start(name, {.argv = std::move(argv)}, c.options.ready_timeout);
      if (!member.ok()) return member.status();
      c.started.push_back({spec.name, (*member)->ports});
      spec_of.push_back(&spec);
    }
  }
  for (size_t m = 0; m < group.members().size(); ++m) {
    const Supervisor::Member& member = *group.members()[m];
    const UpContext::Started& started = c.started[m];
    Progress(absl::StrCat("waiting for ", member.name, " to be ready..."));
    const ServiceSpec& spec = *spec_of[m];
    absl::Status ready = group.WaitReady(
        member, [&] { return spec.ready(c, started.ports); }, start + c.options.ready_timeout);
    if (!ready.ok()) return ready;
  }
  return absl::OkStatus();
}

int RunUp(const Args& args, const std::vector<std::string>& argv) {
  std::vector<const char*> cargv = {"moe-up"};
  std::vector<config::FlagAlias> aliases = {
      {"model", "model_dir"}, {"port", "gateway.port"}, {"routers", "router.replicas"}};
  for (const std::string& a : argv) cargv.push_back(a.c_str());
  auto cl = config::ParseCommandLine(static_cast<int>(cargv.size()), cargv.data(), aliases);
  if (!cl.ok()) {
    std::fprintf(stderr, "moe up: %s\n", std::string(cl.status().message()).c_str());
    return 2;
  }
  if (cl->help) {
    std::fputs(config::DescribeKeys<UpOptions>().c_str(), stdout);
    return 0;
  }
  auto options = config::LoadOptions<UpOptions>(*cl);
  if (options.ok()) {
    if (absl::Status s = options->Validate(); !s.ok()) options = s;
  }
  if (!options.ok()) {
    std::fprintf(stderr, "moe up: %s\n", std::string(options.status().message()).c_str());
    return 2;
  }
  UpContext c;
  c.options = *options;
  c.model_dir = options->model_dir.empty()
                    ? (fs::path(MOE_SOURCE_DIR) / ".models" / options->preset).string()
                    : options->model_dir;
  c.model_dir = fs::absolute(c.model_dir).lexically_normal().string();
  c.data_dir = options->data_dir.empty() ? (fs::path(MOE_SOURCE_DIR) / ".moe-data").string()
                                         : options->data_dir;
  c.data_dir = fs::absolute(c.data_dir).lexically_normal().string();
  {
    const std::string dir = options->security.dir.empty()
                                ? (fs::path(c.data_dir) / "security").string()
                                : options->security.dir;
    absl::StatusOr<ClusterSecurity> security =
        MakeClusterSecurity(options->security, dir, options->host);
    if (!security.ok()) {
      std::fprintf(stderr, "moe up: %s\n", std::string(security.status().message()).c_str());
      return 1;
    }
    c.security = *std::move(security);
    if (c.security.enabled()) {
      Progress(absl::StrCat("security: ", options->security.mtls ? "mTLS" : "no TLS",
                            options->security.auth ? ", per-role auth" : "", "; credentials in ",
                            c.security.dir));
    }
  }

  // SIGINT/SIGTERM are taken by the supervisor (a signalfd), so they are blocked before any
  // thread exists; children start with default signal handling whatever this process blocks.
  common::rpc::BlockTerminationSignals();

  if (absl::Status s = EnsureModel(options->preset, c.model_dir, Progress); !s.ok()) {
    std::fprintf(stderr, "moe up: model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  c.num_experts = NumExperts(c.model_dir);

  Supervisor group(
      {.stop_grace = options->stop_timeout, .output_fd = STDERR_FILENO, .log = Progress});
  const absl::Time start = absl::Now();
  if (absl::Status s = StartCluster(c, group, SelfDir(), start); !s.ok()) {
    std::fprintf(stderr, "moe up: %s\n", std::string(s.message()).c_str());
    group.StopAll();
    return 1;
  }
  const std::vector<std::string> gateway = c.Addresses("gateway", &common::ListeningPorts::http);
  const std::string url =
      absl::StrCat("http://", gateway.empty() ? c.options.host + ":0" : gateway[0]);
  const std::string model = fs::path(c.model_dir).filename().string();
  std::printf(
      "moe up: ready in %.1f s. OpenAI-compatible API at %s/v1 (model \"%s\"); open %s/ in a "
      "browser for the playground (chat and voice)\n"
      "  curl %s/v1/chat/completions -H 'Content-Type: application/json' \\\n"
      "    -d '{\"model\": \"%s\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello!\"}], "
      "\"max_tokens\": 32}'\n"
      "Press Ctrl-C to stop.\n",
      absl::ToDoubleSeconds(absl::Now() - start), url.c_str(), model.c_str(), url.c_str(),
      url.c_str(), model.c_str());
  // Every process with its ports, so that benchmarks and scripts can scrape a router's metrics.
  nlohmann::json services = nlohmann::json::array();
  for (size_t m = 0; m < c.started.size(); ++m) {
    nlohmann::json s = {{"name", group.members()[m]->name}, {"service", c.started[m].service}};
    const common::ListeningPorts& p = c.started[m].ports;
    if (p.grpc) s["grpc"] = *p.grpc;
    if (p.http) s["http"] = *p.http;
    if (p.metrics) s["metrics"] = *p.metrics;
    services.push_back(std::move(s));
  }
  nlohmann::json ready = {
      {"event", "ready"}, {"url", url}, {"model", model}, {"services", std::move(services)}};
  if (c.security.enabled()) ready["security"] = SecurityJson(c.security);
  if (!c.security.api_key_file.empty()) {
    std::printf("API key (Authorization: Bearer ...) in %s\n", c.security.api_key_file.c_str());
  }
  if (c.security.options.mtls) {
    std::printf(
        "  moe admin stats --routers %s --tls-ca %s --tls-cert %s --tls-key %s "
        "--tls-server-name localhost\n",
        absl::StrJoin(c.Addresses("router", &common::ListeningPorts::grpc), ",").c_str(),
        c.security.ca_file.c_str(), c.security.CertFile("admin").c_str(),
        c.security.KeyFile("admin").c_str());
  }
  std::printf("%s\n", ready.dump().c_str());
  std::fflush(stdout);

  const Supervisor::Event event = group.WaitForSignalOrExit({SIGINT, SIGTERM});
  int rc = 0;
  if (event.exited != nullptr) {
    Progress(absl::StrCat(event.exited->name, " exited unexpectedly (exit code ", event.exit_code,
                          "); stopping"));
    rc = 1;
  }
  group.StopAll();
  Progress("stopped");
  (void)args;
  return rc;
}

MOE_REGISTER_COMMAND("up",
                     "starts the local cluster (kv-store, expert workers, router, asr, tts, "
                     "gateway) and prints its URL",
                     RunUp);

}  // namespace
}  // namespace moe::cli
