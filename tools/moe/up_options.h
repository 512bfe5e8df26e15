// `moe up`'s options: the run's settings and one ServiceOptions section per service kind of the
// topology (up_topology.h). Every key has a default; `moe up --help` lists them.
//
//   model_dir: /path/to/checkpoint
//   gateway: {port: 8000, args: ["--set", "limits.max_in_flight=64"]}
//   router: {replicas: 2, args: ["--set", "core.num_threads=2"]}
//   expert_worker: {replicas: 0}   # default 2 (over shared memory); 0: experts in the routers
//   kv_store: {replicas: 1}        # the shared L2/L3 KV tiers (0: routers use L1 only)
//   data_dir: /var/tmp/moe         # where the kv-store keeps L3 (default <repo>/.moe-data)
//   asr: {replicas: 1}             # asr and tts: one each by default (voice); 0 = no voice
//   security: {mtls: true, auth: true}  # a secure local cluster (up_security.h)
//   numerics: {activations: f32, weights: q8_0}  # every router and worker (DESIGN.md §3)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"

namespace moe::cli {

// One kind of service in the topology.
struct ServiceOptions {
  int32_t replicas = 1;           // processes to start (bounds per kind: its ServiceSpec)
  std::vector<std::string> args;  // extra flags for every replica, after the launcher's own
  int32_t port = 0;               // gateway: the HTTP port users call (others: 0 = any)

  static void Describe(common::config::Schema<ServiceOptions>& s);
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// A secure local cluster (up_security.h says what each turns on). All off by default: a local
// cluster on loopback, where every local process is trusted.
struct SecurityOptions {
  bool mtls = false;  // a throwaway CA; mTLS on every gRPC hop
  bool auth = false;  // grpc.auth on every service, and gateway API keys
  // Also grant roles by bearer token files under mtls (without mtls, tokens are how roles go).
  bool tokens = false;
  std::string dir;            // "" = <data_dir>/security; remade on every start
  std::string api_keys_file;  // the gateway's key file (digests); "" = moe up makes one key

  bool UseTokens() const { return auth && (tokens || !mtls); }
  static void Describe(common::config::Schema<SecurityOptions>& s);
  // tokens and api_keys_file need auth (CheckFields calls it, prefixing "security.").
  absl::Status Validate() const;
};

// The cluster-wide numerics (DESIGN.md §3), given to every router and expert worker as their
// core.activations and core.weights, so the processes of a local cluster always agree.
struct NumericsOptions {
  std::string activations = "f32";     // f32 | bf16
  std::string weights = "checkpoint";  // checkpoint | q8_0 (int8 weights quantized on load)

  static void Describe(common::config::Schema<NumericsOptions>& s);
  absl::Status Validate() const;
};

struct UpOptions {
  std::string model_dir;         // "" = <repo>/.models/<preset>
  std::string preset = "small";  // made when model_dir has no config.json
  std::string host = "127.0.0.1";
  std::string data_dir;  // "" = <repo>/.moe-data: L3 of each kv-store in kv-store-<i>/
  absl::Duration ready_timeout = absl::Seconds(180);  // from the first start to all ready
  absl::Duration stop_timeout = absl::Seconds(30);    // per process: SIGTERM, then SIGKILL
  // One field per ServiceSpec of Topology() (its `options`), with that kind's defaults.
  // The design's shape by default: experts on two workers, reached over shared memory
  // (README "Measured figures"); 0 runs the experts inside the routers.
  ServiceOptions expert_worker{.replicas = 2, .args = {}, .port = 0};
  ServiceOptions kv_store;  // one kv-store the routers share
  ServiceOptions router;
  ServiceOptions asr;  // 0 replicas: the gateway's voice endpoints answer 503
  ServiceOptions tts;
  ServiceOptions gateway{.replicas = 1, .args = {}, .port = 8000};
  SecurityOptions security;
  NumericsOptions numerics;

  // The sections come from Topology(), in start order.
  static void Describe(common::config::Schema<UpOptions>& s);
  // Each kind's replicas within its spec's bounds ("router.replicas: at least 1").
  absl::Status Validate() const;
};

}  // namespace moe::cli
