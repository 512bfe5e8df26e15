// The local cluster `moe up` starts, in start order: one ServiceSpec per service kind, saying
// which binary, how many (its UpOptions section), its command line (which may name the
// processes started before it) and how to tell it is ready.
//
// A new service (kv-store, asr, tts, ...) is one entry in Topology() plus its ServiceOptions
// field in UpOptions (up_options.h), which sets its defaults; the config section, --help,
// replica checks, start, readiness and stop follow from the entry.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/process/listening.h"
#include "tools/moe/up_options.h"
#include "tools/moe/up_security.h"

namespace moe::cli {

// What a service's command line may depend on: this run's settings and the processes started
// before it.
struct UpContext {
  UpOptions options;
  std::string model_dir;     // absolute
  std::string data_dir;      // absolute: the kv-stores' L3 directories go below it
  int num_experts = 0;       // routed experts per MoE layer (config.json)
  int host_cores = 0;        // cores the cluster shares; 0 = std::thread::hardware_concurrency()
  ClusterSecurity security;  // this run's credentials (security.*; none by default)

  struct Started {
    std::string service;  // its ServiceSpec's name
    common::ListeningPorts ports;
  };
  std::vector<Started> started;  // in start order

  // "host:port" of each started process of `service` that has the port `which`
  // (&ListeningPorts::grpc, ...), in start order.
  std::vector<std::string> Addresses(const std::string& service,
                                     std::optional<int> common::ListeningPorts::*which) const;
};

struct ServiceSpec {
  std::string name;    // the UpOptions section; processes are "<name>-<index>"
  std::string binary;  // beside `moe` in the build's bin/
  ServiceOptions UpOptions::*options;
  int32_t min_replicas = 0;
  int32_t max_replicas = 64;
  // The launcher's flags for replica `index`; ServiceOptions::args follow them.
  std::function<std::vector<std::string>(const UpContext&, int index)> flags;
  // Whether a process, listening on `ports`, is ready (errors count as "not yet").
  std::function<absl::StatusOr<bool>(const UpContext&, const common::ListeningPorts& ports)> ready;
};

// In start order; stopped in reverse (the gateway drains first).
const std::vector<ServiceSpec>& Topology();
// The spec of that name (an UpOptions section: "router", "kv_store", ...); MOE_CHECKs that
// there is one (the names are the code's own).
const ServiceSpec& ServiceNamed(const std::string& name);

// Compute threads per process so that the processes of this host do not oversubscribe its C
// cores: with expert workers, routers and workers take turns (micro-batch ping-pong off: a
// router waits asleep while the workers compute its layer, and they wait while it computes), so
// each router gets C / routers threads and each worker C / workers, at least 1. Without
// workers, each router C / routers.
struct ThreadPlan {
  int router_threads = 1;  // core.num_threads of each router
  int worker_threads = 1;  // core.threads_per_call of each expert worker
};
ThreadPlan PlanThreads(const UpContext& c);

}  // namespace moe::cli
