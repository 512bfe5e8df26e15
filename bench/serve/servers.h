// The two systems `moe bench serve` drives through the same OpenAI API, as child processes on
// loopback: our cluster (`moe up`, the topology users get, embedded or with expert workers)
// and llama.cpp's llama-server on the same checkpoint exported with `moe export-gguf`.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"

namespace moe::bench::serve {

struct RunningServer {
  std::string system;                     // "moe" / "moe-disagg" / "llama-server" (results' params)
  int port = 0;                           // HTTP: /v1/completions
  std::string model;                      // the "model" field requests carry
  std::vector<int> router_metrics_ports;  // ours: each router's /metrics
  std::vector<int> router_grpc_ports;     // ours: each router's gRPC (`moe admin --routers`)
  std::unique_ptr<common::process::ChildProcess> child;
  // SIGTERM and wait (`moe up` stops its services, the gateway first). Idempotent.
  void Stop();
};

// Waits (at most `max_wait`) until the machine's CPUs have been idle (under 10% busy) for one
// 100 ms window, and returns how long it waited. Measure (serve_kit.h) calls it first: a server
// that has just worked may keep its threads spinning for a while (llama-server's ggml pool does,
// for ~0.1-0.5 s after each request), and the next system measured would share the cores with them.
absl::Duration SettleCpu(absl::Duration max_wait = absl::Seconds(3));

struct ClusterOptions {
  std::string moe_binary;  // the `moe` CLI
  std::string model_dir;
  int router_threads = 2;  // core.num_threads of the router
  int expert_workers = 0;  // 0: experts inside the router (embedded)
  int worker_threads = 1;
  std::string stderr_path;  // the cluster's log; "" = inherit
  std::string work_dir;     // where its config file goes
  // Names the config file (moe-up-<name>.yaml) and, with `fresh_data`, the kv-store's L3
  // directory (<work_dir>/moe-data-<name>, emptied first, so no earlier run's blocks are hit);
  // "" = the number of expert workers.
  std::string name;
  bool fresh_data = false;
  std::vector<std::string> router_args;    // more `--set k=v` flags for the router
  std::vector<std::string> kv_store_args;  // ... and for the kv-store
};
// `moe up --config F` on port 0; returns once it printed its ready line (gateway URL and every
// service's ports). kDeadlineExceeded after 180 s; kInternal when it exits first (its log
// named in the message).
absl::StatusOr<RunningServer> StartCluster(const ClusterOptions& options);

struct LlamaServerOptions {
  std::string binary;  // llama-server
  std::string gguf;
  int threads = 2;       // -t
  int parallel = 16;     // -np (slots)
  int context = 131072;  // -c (shared by the slots: context / parallel each)
  std::string stderr_path;
};
// Starts llama-server on a free loopback port and waits until /health says 200.
// kNotFound when the binary is missing.
absl::StatusOr<RunningServer> StartLlamaServer(const LlamaServerOptions& options);

// `moe export-gguf --model DIR --out FILE` (skipped when FILE exists and is newer than the
// checkpoint's config.json).
absl::Status ExportGguf(const std::string& moe_binary, const std::string& model_dir,
                        const std::string& gguf);

// One sample of a Prometheus text exposition: the value of `name{labels}` (labels as written
// between the braces, e.g. `tier="l1"`; "" for none), summed over matching series when the
// exposition has more labels than given. nullopt when absent.
std::optional<double> ScrapeValue(const std::string& exposition, const std::string& name,
                                  const std::string& labels);

}  // namespace moe::bench::serve
