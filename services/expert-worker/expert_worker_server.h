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

// Thread-safe (gRPC threads call it). Borrows `core`.
class ExpertWorkerServer final : public moe::expert_worker::v1::ExpertWorker::Service {
 public:
  explicit ExpertWorkerServer(ExpertWorkerCore* core) : core_(core) {}

  // moe::expert_worker::v1::ExpertWorker::Service
  ::grpc::Status RunExperts(::grpc::ServerContext* context,
                            const moe::expert_worker::v1::RunExpertsRequest* request,
                            moe::expert_worker::v1::RunExpertsResponse* response) override;
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
