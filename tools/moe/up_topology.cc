#include "tools/moe/up_topology.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/grpc/channel_factory.h"
#include "common/http/http_client.h"

namespace moe::cli {
namespace {

using common::ListeningPorts;

// grpc.health.v1 says SERVING (the whole server).
absl::StatusOr<bool> GrpcServing(const UpContext& c, const ListeningPorts& ports) {
  if (!ports.grpc) return absl::InternalError("no grpc port");
  auto channel = common::rpc::CreateChannel(absl::StrCat(c.options.host, ":", *ports.grpc));
  if (!channel.ok()) return channel.status();
  absl::StatusOr<bool> serving = common::rpc::CheckServing(**channel, "", absl::Seconds(1));
  return serving.ok() && *serving;
}

// GET /readyz answers 200.
absl::StatusOr<bool> HttpReady(const UpContext& c, const ListeningPorts& ports) {
  if (!ports.http) return absl::InternalError("no http port");
  auto r = common::http::HttpCall(c.options.host, *ports.http, "GET", "/readyz", absl::Seconds(2));
  return r && r->status == 200;
}

std::vector<ServiceSpec> MakeTopology() {
  std::vector<ServiceSpec> specs;
  specs.push_back({
      .name = "expert_worker",
      .binary = "expert-worker",
      .options = &UpOptions::expert_worker,
      .flags =
          [](const UpContext& c, int) {
            // Every worker holds every expert; routers spread calls over the replicas.
            return std::vector<std::string>{
                "--set", "core.model_dir=" + c.model_dir,
                "--set", absl::StrCat("core.experts=*:0-", std::max(0, c.num_experts - 1)),
                "--set", "grpc.host=" + c.options.host,
                "--set", "grpc.port=0",
                "--set", "metrics.host=" + c.options.host,
                "--set", "metrics.port=0"};
          },
      .ready = GrpcServing,
  });
  specs.push_back({
      .name = "router",
      .binary = "router",
      .options = &UpOptions::router,
      .min_replicas = 1,
      .flags =
          [](const UpContext& c, int i) {
            std::vector<std::string> flags = {"--set", "core.model_dir=" + c.model_dir,
                                              "--set", "grpc.host=" + c.options.host,
                                              "--set", "grpc.port=0",
                                              "--set", "metrics.host=" + c.options.host,
                                              "--set", "metrics.port=0",
                                              "--set", absl::StrCat("router_id=router-", i)};
            const std::vector<std::string> workers =
                c.Addresses("expert_worker", &ListeningPorts::grpc);
            if (!workers.empty()) {
              flags.push_back("--set");
              flags.push_back("experts.workers=" + absl::StrJoin(workers, ","));
              // Router and workers share this machine's cores: micro-batch ping-pong only adds
              // contention when there are none to spare (0.83-0.89x on 2 vCPUs, README).
              if (std::thread::hardware_concurrency() < 4) {
                flags.push_back("--set");
                flags.push_back("core.micro_batches=1");
              }
            }
            return flags;
          },
      .ready = GrpcServing,
  });
  // The speech services (DESIGN.md §2): the gateway's audio endpoints and /v1/realtime use them.
  for (const auto& [name, options] :
       {std::pair{"asr", &UpOptions::asr}, std::pair{"tts", &UpOptions::tts}}) {
    specs.push_back({
        .name = name,
        .binary = name,
        .options = options,
        .flags =
            [](const UpContext& c, int) {
              return std::vector<std::string>{
                  "--set", "grpc.host=" + c.options.host,    "--set", "grpc.port=0",
                  "--set", "metrics.host=" + c.options.host, "--set", "metrics.port=0"};
            },
        .ready = GrpcServing,
    });
  }
  specs.push_back({
      .name = "gateway",
      .binary = "gateway",
      .options = &UpOptions::gateway,
      .min_replicas = 1,
      .max_replicas = 1,
      .flags =
          [](const UpContext& c, int) {
            return std::vector<std::string>{
                "--set",
                "model_dir=" + c.model_dir,
                "--set",
                "http.host=" + c.options.host,
                "--set",
                absl::StrCat("http.port=", c.options.gateway.port),
                "--set",
                "routing.routers=" + absl::StrJoin(c.Addresses("router", &ListeningPorts::grpc), ","),
                "--set",
                "voice.asr=" + absl::StrJoin(c.Addresses("asr", &ListeningPorts::grpc), ","),
                "--set",
                "voice.tts=" + absl::StrJoin(c.Addresses("tts", &ListeningPorts::grpc), ",")};
          },
      .ready = HttpReady,
  });
  return specs;
}

}  // namespace

std::vector<std::string> UpContext::Addresses(
    const std::string& service, std::optional<int> common::ListeningPorts::*which) const {
  std::vector<std::string> out;
  for (const Started& s : started) {
    if (s.service == service && (s.ports.*which)) {
      out.push_back(absl::StrCat(options.host, ":", *(s.ports.*which)));
    }
  }
  return out;
}

const std::vector<ServiceSpec>& Topology() {
  static const std::vector<ServiceSpec>* specs = new std::vector<ServiceSpec>(MakeTopology());
  return *specs;
}

}  // namespace moe::cli
