#include "tools/moe/up_topology.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/base/check.h"
#include "common/grpc/channel_factory.h"
#include "common/http/http_client.h"

namespace moe::cli {
namespace {

using common::ListeningPorts;

// Every gRPC service's server flags: bound to `moe up`'s host, ports picked by the OS, and the
// security the run asks for (grpc.tls, grpc.auth with `kind`'s certificate; up_security.h).
std::vector<std::string> ServerFlags(const UpContext& c, const std::string& kind,
                                     std::vector<std::string> flags = {}) {
  for (const char* key : {"grpc.host=", "metrics.host="}) {
    flags.insert(flags.end(), {"--set", key + c.options.host});
  }
  flags.insert(flags.end(), {"--set", "grpc.port=0", "--set", "metrics.port=0"});
  for (std::string& f : c.security.ServerFlags(kind)) flags.push_back(std::move(f));
  return flags;
}

void Append(std::vector<std::string>& flags, std::vector<std::string> more) {
  for (std::string& f : more) flags.push_back(std::move(f));
}

// grpc.health.v1 says SERVING (the whole server), asked as the admin role under mTLS.
absl::StatusOr<bool> GrpcServing(const UpContext& c, const ListeningPorts& ports) {
  if (!ports.grpc) return absl::InternalError("no grpc port");
  auto channel = common::rpc::CreateChannel(absl::StrCat(c.options.host, ":", *ports.grpc),
                                            c.security.AdminChannel());
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

int Cores(const UpContext& c) {
  return c.host_cores > 0 ? c.host_cores
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::vector<ServiceSpec> MakeTopology() {
  std::vector<ServiceSpec> specs;
  specs.push_back({
      .name = "expert_worker",
      .binary = "expert-worker",
      .options = &UpOptions::expert_worker,
      .flags =
          [](const UpContext& c, int) {
            // Every worker holds every expert; routers spread calls over the replicas. Routers
            // on this host reach it over shared memory (NegotiateTransport; shm.* defaults).
            return ServerFlags(
                c, "expert_worker",
                {"--set", "core.model_dir=" + c.model_dir, "--set",
                 absl::StrCat("core.experts=*:0-", std::max(0, c.num_experts - 1)), "--set",
                 absl::StrCat("core.threads_per_call=", PlanThreads(c).worker_threads), "--set",
                 "core.activations=" + c.options.numerics.activations, "--set",
                 "core.weights=" + c.options.numerics.weights});
          },
      .ready = GrpcServing,
  });
  specs.push_back({
      .name = "kv_store",
      .binary = "kv-store",
      .options = &UpOptions::kv_store,
      .max_replicas = 16,
      .flags =
          [](const UpContext& c, int i) {
            // L3 survives `moe up` restarts in the data directory; 2 GiB of it by default here.
            return ServerFlags(c, "kv_store",
                               {"--set", absl::StrCat("core.l3_dir=", c.data_dir, "/kv-store-", i),
                                "--set", "core.l3_bytes=2147483648"});
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
            std::vector<std::string> flags =
                ServerFlags(c, "router",
                            {"--set", "core.model_dir=" + c.model_dir, "--set",
                             absl::StrCat("router_id=router-", i), "--set",
                             "core.activations=" + c.options.numerics.activations, "--set",
                             "core.weights=" + c.options.numerics.weights});
            // It dials the kv-stores and the expert workers (the shared-memory negotiation
            // too) as the router role.
            Append(flags, c.security.ChannelFlags("kv_store.channel", "router", "router"));
            Append(flags, c.security.ChannelFlags("experts.channel", "router", "router"));
            const std::vector<std::string> stores = c.Addresses("kv_store", &ListeningPorts::grpc);
            if (!stores.empty()) {
              flags.push_back("--set");
              flags.push_back("kv_store.targets=" + absl::StrJoin(stores, ","));
            }
            const std::vector<std::string> workers =
                c.Addresses("expert_worker", &ListeningPorts::grpc);
            flags.push_back("--set");
            flags.push_back(absl::StrCat("core.num_threads=", PlanThreads(c).router_threads));
            if (!workers.empty()) {
              flags.push_back("--set");
              flags.push_back("experts.workers=" + absl::StrJoin(workers, ","));
              // Router and workers share this machine's cores and take turns on them; ping-pong
              // would run both at once (more compute threads than cores).
              flags.push_back("--set");
              flags.push_back("core.micro_batches=1");
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
        .flags = [kind = std::string(name)](const UpContext& c,
                                            int) { return ServerFlags(c, kind); },
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
            std::vector<std::string> flags{
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
            // It dials routers, asr and tts as the gateway role; clients need an API key.
            Append(flags, c.security.ChannelFlags("routing.channel", "gateway", "gateway"));
            Append(flags, c.security.ChannelFlags("voice.channel", "gateway", "gateway"));
            if (!c.security.api_keys_file.empty()) {
              flags.insert(flags.end(),
                           {"--set", "auth.api_keys_file=" + c.security.api_keys_file});
            }
            return flags;
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

ThreadPlan PlanThreads(const UpContext& c) {
  const int cores = Cores(c);
  const int routers = std::max(1, c.options.router.replicas);
  const int workers = c.options.expert_worker.replicas;
  ThreadPlan plan;
  plan.router_threads = std::max(1, cores / routers);
  plan.worker_threads = workers > 0 ? std::max(1, cores / workers) : 1;
  return plan;
}

const std::vector<ServiceSpec>& Topology() {
  static const std::vector<ServiceSpec>* specs = new std::vector<ServiceSpec>(MakeTopology());
  return *specs;
}

const ServiceSpec& ServiceNamed(const std::string& name) {
  for (const ServiceSpec& s : Topology()) {
    if (s.name == name) return s;
  }
  MOE_CHECK_MSG(false, absl::StrCat("no service named ", name).c_str());
  return Topology().front();
}

}  // namespace moe::cli
