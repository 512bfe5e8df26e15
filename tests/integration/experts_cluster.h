// Test harness for the disaggregated-experts integration tests: expert-worker and router
// processes on loopback (their binaries from $MOE_BUILD_DIR/bin), and a Generate client.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/process/child_process.h"
#include "moe/router/v1/router.grpc.pb.h"

namespace moe::testing {

struct Proc {
  std::unique_ptr<common::process::ChildProcess> child;
  int grpc_port = 0;
  int metrics_port = 0;
  int http_port = 0;  // services with an HTTP front (the gateway)
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port); }
};

// `$MOE_BUILD_DIR/bin/<name>`.
std::string BinPath(const std::string& name);

// Starts a service (`argv[0]` a binary from BinPath), its stderr to `log_path`, and waits for its
// listening line (printed once it is SERVING; it names a gRPC or an HTTP port).
absl::StatusOr<Proc> LaunchService(std::vector<std::string> argv, const std::string& log_path);

// Starts `expert-worker` holding `experts` (specs, e.g. {"*:0-7"}) on `port` (0 = any) and waits
// for its listening line (printed once warmed up and SERVING). Its shared-memory socket goes in
// `shm_dir` (a short path: Unix socket paths stay under 108 bytes).
absl::StatusOr<Proc> StartWorker(const std::string& model_dir,
                                 const std::vector<std::string>& experts, int port,
                                 const std::string& log_path, const std::string& shm_dir);

// Starts `router` with experts on `workers` and `placement` specs (empty workers = embedded),
// reaching them over `transport` (experts.transport: auto, grpc or shm), on gRPC `port` (0 =
// any: a restart on the same port keeps its clients' targets), `extra_yaml` appended to its
// config (top-level sections, e.g. "kv_store:\n  targets: [...]\n").
absl::StatusOr<Proc> StartRouter(const std::string& model_dir,
                                 const std::vector<std::string>& workers,
                                 const std::vector<std::string>& placement, int replicas,
                                 const std::string& dir, const std::string& transport = "auto",
                                 int port = 0, const std::string& extra_yaml = "");

// Starts `gateway` on an HTTP port of its own in front of `routers` (gRPC targets), with
// `sets` (more `--set key=value`), and waits for its listening line.
absl::StatusOr<Proc> StartGateway(const std::string& model_dir,
                                  const std::vector<std::string>& routers, const std::string& dir,
                                  const std::vector<std::string>& sets = {});

// One streamed completion through the gateway (POST /v1/completions, SSE), as the client saw
// it.
struct SseResult {
  int status = 0;             // the HTTP status; 0 when no response head came
  std::string text;           // the choices' text, concatenated
  std::string finish_reason;  // of the last chunk that had one
  std::string error;          // an error body (status >= 400) or an SSE error event's message
  bool done = false;          // `data: [DONE]` came
  bool ended = false;         // the body ended cleanly (the last chunk)
  absl::Duration elapsed;     // from the request to the end (or to the client's give-up)
};

// Greedy (temperature 0, ignore_eos) completion of `max_tokens` tokens of a token-id `prompt`
// for model `model`. The client gives up after `deadline` (each read waits at most that long).
// `on_event` (optional) runs after each SSE event.
SseResult StreamCompletion(int gateway_port, const std::string& model,
                           const std::vector<int32_t>& prompt, int max_tokens,
                           absl::Duration deadline,
                           const std::function<void()>& on_event = nullptr);

// The value of one sample of `proc`'s /metrics, e.g. Metric(p,
// "moe_expert_calls_total{transport=\"shm\",worker=\"0\"}"); -1 when absent.
double Metric(const Proc& proc, const std::string& sample);

struct GenerateResult {
  std::vector<int32_t> tokens;
  moe::router::v1::FinishReason finish_reason = moe::router::v1::FINISH_REASON_UNSPECIFIED;
  std::string error_message;
  std::string rpc_error;  // non-empty when the RPC itself failed
};

// Greedy generation of `max_tokens` tokens (ignore_eos). `on_token` (optional) runs after each
// received message.
GenerateResult Generate(moe::router::v1::Router::Stub& stub, const std::vector<int32_t>& prompt,
                        int max_tokens, const std::function<void()>& on_token = nullptr);

// `prompts.size()` concurrent streams.
std::vector<GenerateResult> GenerateAll(const std::string& router_address,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        int max_tokens,
                                        const std::function<void()>& on_token = nullptr);

std::unique_ptr<moe::router::v1::Router::Stub> RouterStub(const std::string& address);

// Deterministic prompts: `n` prompts of `len` tokens in [3, vocab).
std::vector<std::vector<int32_t>> MakePrompts(int n, int len, int vocab, uint32_t seed);

}  // namespace moe::testing
