// The expert worker's gRPC face (moe.expert_worker.v1.ExpertWorker): proto <-> core conversion
// and absl -> gRPC status. RunExperts reads each batch's packed f32 activations in place (no
// copy) and writes the outputs straight into the response's bytes.
#pragma once

#include <functional>
#include <string>

#include "common/config/schema.h"
#include "common/grpc/auth.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "services/expert-worker/core/expert_worker_core.h"
#include "services/expert-worker/core/nccl_bootstrap.h"
#include "services/expert-worker/core/shm_server.h"

namespace moe::expert_worker {

// Everything main.cc reads from --config / --set.
struct ExpertWorkerOptions {
  ExpertWorkerCoreOptions core;
  ShmServerOptions shm;  // the shared-memory data plane for co-located routers
  common::rpc::ServerOptions grpc;
  common::metrics::MetricsServerOptions metrics;
  std::string log_level = "info";

  static void Describe(common::config::Schema<ExpertWorkerOptions>& s) {
    s.Section("core", &ExpertWorkerOptions::core);
    s.Section("shm", &ExpertWorkerOptions::shm);
    s.Section("grpc", &ExpertWorkerOptions::grpc);
    s.Section("metrics", &ExpertWorkerOptions::metrics);
    s.Add("log_level", &ExpertWorkerOptions::log_level, "trace|debug|info|warn|error|off");
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// RunExperts on `core`: checks and converts `request`, computes into `response` (outputs written
// straight into its bytes). INVALID_ARGUMENT for malformed tensors, else core.Run()'s errors
// (`response` is cleared on error). Blocks the calling thread (the synchronous form, kept for
// tools and `moe bench rpc`; the server uses RunAsync).
::grpc::Status HandleRunExperts(ExpertWorkerCore& core,
                                const moe::expert_worker::v1::RunExpertsRequest& request,
                                moe::expert_worker::v1::RunExpertsResponse* response);

// RunExperts is a callback (reactor) method: the gRPC thread that read the request computes it
// right away when the core has a free slot and inline capacity (ExpertWorkerCoreOptions::
// max_inline_calls), else the core's slot threads do; it never blocks a gRPC thread waiting for
// a slot, and a full queue answers RESOURCE_EXHAUSTED. (A synchronous method would add a hop
// per call: gRPC's sync-server threads hand the request over and spawn pollers; measured with
// `moe bench rpc`.) LoadExperts / UnloadExperts stay synchronous (rare and slow: they map and
// warm up weights) on gRPC's sync-server threads.
//
// NegotiateTransport offers shared memory (a ticket from the ShmServer) to callers that the
// authorizer admits and that run on this host (same boot id), gRPC otherwise.
//
// Thread-safe (gRPC threads call it) once configured: EnableSharedMemory and
// SetTransportAuthorizer only before the server starts. Borrows `core` (and the ShmServer).
// Who may call each method (common/grpc/auth.h; SECURITY.md): routers run experts and negotiate
// the data plane; the admin (moe admin, the operator) loads and unloads them.
inline constexpr common::rpc::MethodPolicy kRunExpertsPolicy{"RunExperts",
                                                             {common::rpc::Role::kRouter}};
inline constexpr common::rpc::MethodPolicy kNegotiateTransportPolicy{"NegotiateTransport",
                                                                     {common::rpc::Role::kRouter}};
inline constexpr common::rpc::MethodPolicy kLoadExpertsPolicy{"LoadExperts",
                                                              {common::rpc::Role::kAdmin}};
inline constexpr common::rpc::MethodPolicy kUnloadExpertsPolicy{"UnloadExperts",
                                                                {common::rpc::Role::kAdmin}};
inline constexpr common::rpc::MethodPolicy kExpertWorkerPolicies[] = {
    kRunExpertsPolicy, kNegotiateTransportPolicy, kLoadExpertsPolicy, kUnloadExpertsPolicy};

class ExpertWorkerServer final
    : public moe::expert_worker::v1::ExpertWorker::WithCallbackMethod_RunExperts<
          moe::expert_worker::v1::ExpertWorker::Service> {
 public:
  // Who may have a data plane other than RunExperts on this channel: the security issue's hook
  // (it will check the caller's identity from the context). OK admits; an error is returned to
  // the caller as is (PERMISSION_DENIED).
  using TransportAuthorizer = std::function<absl::Status(const ::grpc::ServerContext&)>;

  explicit ExpertWorkerServer(ExpertWorkerCore* core) : core_(core) {}

  // Offers `shm`'s regions to callers whose boot id is `boot_id` ("" = do not compare).
  void EnableSharedMemory(ShmServer& shm, std::string boot_id) {
    shm_ = &shm;
    boot_id_ = std::move(boot_id);
  }
  // Offers NCCL communicators (TRANSPORT_KIND_NCCL) from `nccl` to callers that accept them,
  // before shared memory when the caller prefers it so; without a device the offer fails and
  // the caller gets the next data plane, with the reason.
  void EnableNccl(NcclBootstrap& nccl) { nccl_ = &nccl; }
  // Checks every method's MethodPolicy with `auth` (borrowed; main passes the Authorizer made
  // from grpc.auth). Default: every caller this server accepts (tests of the core behind it).
  void SetAuthorizer(const common::rpc::Authorizer& auth) { auth_ = &auth; }
  // Default: every caller this server accepts (its TLS settings apply to the RPC).
  void SetTransportAuthorizer(TransportAuthorizer authorizer) {
    authorizer_ = std::move(authorizer);
  }

  // moe::expert_worker::v1::ExpertWorker::CallbackService
  ::grpc::ServerUnaryReactor* RunExperts(
      ::grpc::CallbackServerContext* context,
      const moe::expert_worker::v1::RunExpertsRequest* request,
      moe::expert_worker::v1::RunExpertsResponse* response) override;
  // moe::expert_worker::v1::ExpertWorker::Service
  ::grpc::Status LoadExperts(::grpc::ServerContext* context,
                             const moe::expert_worker::v1::LoadExpertsRequest* request,
                             moe::expert_worker::v1::LoadExpertsResponse* response) override;
  ::grpc::Status UnloadExperts(::grpc::ServerContext* context,
                               const moe::expert_worker::v1::UnloadExpertsRequest* request,
                               moe::expert_worker::v1::UnloadExpertsResponse* response) override;
  ::grpc::Status NegotiateTransport(
      ::grpc::ServerContext* context,
      const moe::expert_worker::v1::NegotiateTransportRequest* request,
      moe::expert_worker::v1::NegotiateTransportResponse* response) override;

 private:
  ::grpc::Status Check(const ::grpc::ServerContextBase& context,
                       const common::rpc::MethodPolicy& policy) const {
    return auth_ == nullptr ? ::grpc::Status::OK : auth_->Check(context, policy);
  }

  ExpertWorkerCore* const core_;
  const common::rpc::Authorizer* auth_ = nullptr;
  ShmServer* shm_ = nullptr;       // null: shared memory off
  NcclBootstrap* nccl_ = nullptr;  // null: NCCL off
  std::string boot_id_;
  TransportAuthorizer authorizer_ = [](const ::grpc::ServerContext&) { return absl::OkStatus(); };
};

}  // namespace moe::expert_worker
