// The router's gRPC face (moe.router.v1.Router): proto <-> core conversion, absl -> gRPC status,
// per-call deadlines and client cancellation. The scheduling itself is core/scheduler.h.
//
// GenerateBatch (the gateway's path) carries many requests on one stream and answers with one
// message per scheduler step holding every request's new tokens (router.proto). It is served
// through gRPC's callback API (common/grpc/blocking_bidi_call.h says why), and its writer thread
// wakes once per step (Scheduler::AddStepListener), not once per token per request.
// Generate streams one GenerateResponse per batch of new tokens (usually one token) and a last
// message with finish_reason and usage; requests rejected before streaming get a gRPC error
// (INVALID_ARGUMENT, FAILED_PRECONDITION, RESOURCE_EXHAUSTED, UNAVAILABLE). A client that goes
// away (or whose call deadline passes) is cancelled in the scheduler, which frees its KV blocks
// at the next step. GetStats reports queue and L1 figures and, with remote experts, the active
// placement and the load window (tokens per (layer, expert) and per (layer, worker)).
// SetPlacement switches the remote experts' placement (recalibration step 2) and answers once the
// old version's calls drained; UNIMPLEMENTED when the experts run in-process.
#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/grpc/auth.h"
#include "common/grpc/blocking_bidi_call.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "services/router/core/router_core.h"
#include "services/router/core/scheduler.h"
#include "services/router/kv_store_client.h"
#include "services/router/remote_expert_executor.h"

namespace moe::router {

// Everything main.cc reads from --config / --set.
struct RouterOptions {
  RouterCoreOptions core;
  // Remote expert workers (empty `experts.workers` = experts in-process, the embedded mode).
  RemoteExpertsOptions experts;
  // The kv-store below L1 (empty `kv_store.targets` = none).
  KvStoreClientOptions kv_store;
  common::rpc::ServerOptions grpc;
  common::metrics::MetricsServerOptions metrics;
  // This router's id in GetStats ("" = the host name).
  std::string router_id;
  // Log level: trace|debug|info|warn|error|off.
  std::string log_level = "info";

  static void Describe(common::config::Schema<RouterOptions>& s) {
    s.Section("core", &RouterOptions::core);
    s.Section("experts", &RouterOptions::experts);
    s.Section("kv_store", &RouterOptions::kv_store);
    s.Section("grpc", &RouterOptions::grpc);
    s.Section("metrics", &RouterOptions::metrics);
    s.Add("router_id", &RouterOptions::router_id, "id reported by GetStats; default host name");
    s.Add("log_level", &RouterOptions::log_level, "trace|debug|info|warn|error|off");
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// What the server needs to know about the model besides the scheduler.
struct RouterServerInfo {
  std::string model_name;  // GenerateRequest.model must be "" or this
  std::string router_id;
  int64_t vocab_size = 0;
  int64_t max_context = 0;
  int64_t num_layers = 0;
  int64_t num_experts = 0;
  kv::BlockHashRootKey kv_namespace;  // GetStats.kv_namespace (RouterCore::kv_namespace())
};

// Who may call each method (common/grpc/auth.h; SECURITY.md): the gateway generates, the admin
// (moe admin, the operator) switches placements, both read stats.
inline constexpr common::rpc::MethodPolicy kGeneratePolicy{"Generate",
                                                           {common::rpc::Role::kGateway}};
inline constexpr common::rpc::MethodPolicy kGetStatsPolicy{
    "GetStats", {common::rpc::Role::kGateway, common::rpc::Role::kAdmin}};
inline constexpr common::rpc::MethodPolicy kSetPlacementPolicy{"SetPlacement",
                                                               {common::rpc::Role::kAdmin}};
inline constexpr common::rpc::MethodPolicy kGenerateBatchPolicy{"GenerateBatch",
                                                                {common::rpc::Role::kGateway}};
inline constexpr common::rpc::MethodPolicy kRouterPolicies[] = {
    kGeneratePolicy, kGenerateBatchPolicy, kGetStatsPolicy, kSetPlacementPolicy};

// Thread-safe: gRPC calls it from its own threads. Borrows the scheduler, clock and authorizer.
class RouterServer final : public moe::router::v1::Router::WithCallbackMethod_GenerateBatch<
                               moe::router::v1::Router::Service> {
 public:
  RouterServer(Scheduler& scheduler, RouterServerInfo info, common::Clock& clock,
               const common::rpc::Authorizer& auth);

  // Where the routed experts run when they are remote (optional, borrowed): GetStats then reports
  // its placement and load window, and SetPlacement switches it. Call before serving.
  void set_remote_experts(RemoteExpertExecutor* experts) { experts_ = experts; }
  // Compiles GenerateRequest.constraint (optional, borrowed; RouterCore::grammar_cache()).
  // Without it a constrained request is FAILED_PRECONDITION. Call before serving.
  void set_grammar_cache(grammar::GrammarCache* cache) { grammar_cache_ = cache; }

  // Before the gRPC server's drain: GenerateBatch streams refuse new requests (UNAVAILABLE, so
  // the gateway retries them elsewhere) and end once their running requests have finished,
  // instead of holding the drain until its deadline. Any thread.
  void BeginDrain();

  // The core request for a proto request (exposed for tests). INVALID_ARGUMENT /
  // FAILED_PRECONDITION as documented in router.proto.
  absl::StatusOr<GenerateRequest> FromProto(const moe::router::v1::GenerateRequest& request) const;

  // moe::router::v1::Router::Service
  ::grpc::Status Generate(::grpc::ServerContext* context,
                          const moe::router::v1::GenerateRequest* request,
                          ::grpc::ServerWriter<moe::router::v1::GenerateResponse>* writer) override;
  ::grpc::ServerBidiReactor<moe::router::v1::GenerateBatchRequest,
                            moe::router::v1::GenerateBatchResponse>*
  GenerateBatch(::grpc::CallbackServerContext* context) override;
  ::grpc::Status GetStats(::grpc::ServerContext* context,
                          const moe::router::v1::GetStatsRequest* request,
                          moe::router::v1::GetStatsResponse* response) override;
  ::grpc::Status SetPlacement(::grpc::ServerContext* context,
                              const moe::router::v1::SetPlacementRequest* request,
                              moe::router::v1::SetPlacementResponse* response) override;

 private:
  class BatchSession;  // one GenerateBatch stream's requests (router_server.cc)

  // One GenerateBatch call, on its own thread (common/grpc/blocking_bidi_call.h).
  ::grpc::Status ServeBatch(
      common::rpc::BlockingBidiCall<moe::router::v1::GenerateBatchRequest,
                                    moe::router::v1::GenerateBatchResponse>& stream);

  // Converts, checks the request_id is not running, and submits (refusals logged).
  absl::StatusOr<SubmittedRequest> Admit(const moe::router::v1::GenerateRequest& request,
                                         const std::string& http_id);
  void ReleaseRequestId(const std::string& request_id);

  Scheduler& scheduler_;
  const RouterServerInfo info_;
  common::Clock& clock_;
  const common::rpc::Authorizer& auth_;
  RemoteExpertExecutor* experts_ = nullptr;
  grammar::GrammarCache* grammar_cache_ = nullptr;

  absl::Mutex mu_;
  // request_ids of running Generate calls (a duplicate is INVALID_ARGUMENT).
  absl::flat_hash_set<std::string> active_request_ids_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<BatchSession*> sessions_ ABSL_GUARDED_BY(mu_);  // open GenerateBatch streams
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace moe::router
