// The expert worker's gRPC face (moe.expert_worker.v1.ExpertWorker): proto <-> core conversion
// and absl -> gRPC status. RunExperts reads each batch's packed f32 activations in place (no
// copy) and writes the outputs straight into the response's bytes.
#pragma once

#include <string>

#include "common/config/schema.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "services/expert-worker/core/expert_worker_core.h"

namespace moe::expert_worker {

// Everything main.cc reads from --config / --set.
struct ExpertWorkerOptions {
  ExpertWorkerCoreOptions core;
  common::rpc::ServerOptions grpc;
  common::metrics::MetricsServerOptions metrics;
  std::string log_level = "info";

  static void Describe(common::config::Schema<ExpertWorkerOptions>& s) {
    s.Section("core", &ExpertWorkerOptions::core);
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
// Thread-safe (gRPC threads call it). Borrows `core`.
class ExpertWorkerServer final
    : public moe::expert_worker::v1::ExpertWorker::WithCallbackMethod_RunExperts<
          moe::expert_worker::v1::ExpertWorker::Service> {
 public:
  explicit ExpertWorkerServer(ExpertWorkerCore* core) : core_(core) {}

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

 private:
  ExpertWorkerCore* const core_;
};

}  // namespace moe::expert_worker
