#include "services/router/grpc_recalibration_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/grpc/status.h"
#include "grpcpp/client_context.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "services/router/placement_proto.h"

namespace moe::router {
namespace {

namespace rpb = ::moe::router::v1;
namespace wpb = ::moe::expert_worker::v1;

template <typename Req>
void AddKeys(const std::vector<model::ExpertKey>& keys, Req* req) {
  for (const auto& k : keys) {
    auto* key = req->add_experts();
    key->set_layer_idx(static_cast<int32_t>(k.layer));
    key->set_expert_id(static_cast<int32_t>(k.expert));
  }
}

absl::Status Prefixed(const absl::Status& s, const std::string& peer, const char* rpc) {
  return s.ok() ? s : absl::Status(s.code(), absl::StrCat(peer, ": ", rpc, ": ", s.message()));
}

}  // namespace

GrpcRecalibrationTransport::GrpcRecalibrationTransport(std::vector<std::string> routers,
                                                       GrpcRecalibrationTransportOptions options)
    : routers_(std::move(routers)), options_(std::move(options)) {}

GrpcRecalibrationTransport::~GrpcRecalibrationTransport() = default;

absl::Status GrpcRecalibrationTransport::Connect() {
  for (const std::string& r : routers_) {
    auto ch = common::rpc::CreateChannel(r, options_.channel);
    if (!ch.ok()) return ch.status();
    stubs_.push_back(rpb::Router::NewStub(*ch));
  }
  return absl::OkStatus();
}

absl::StatusOr<rpb::GetStatsResponse> GrpcRecalibrationTransport::RawStats(int router,
                                                                           absl::Duration window) {
  rpb::GetStatsRequest req;
  req.set_load_window_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(window)));
  rpb::GetStatsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  auto s = common::rpc::FromGrpcStatus(stubs_[router]->GetStats(&ctx, req, &resp));
  if (!s.ok()) return Prefixed(s, routers_[router], "GetStats");
  return resp;
}

absl::StatusOr<RouterLoadReport> GrpcRecalibrationTransport::GetStats(int router,
                                                                      absl::Duration window) {
  auto resp = RawStats(router, window);
  if (!resp.ok()) return resp.status();
  if (!resp->has_placement()) {
    return absl::FailedPreconditionError(
        absl::StrCat(routers_[router], " runs its experts in-process: nothing to place"));
  }
  return ToReport(*resp);
}

absl::StatusOr<RouterLoadReport> GrpcRecalibrationTransport::ToReport(
    const rpb::GetStatsResponse& resp) {
  auto table = PlacementFromProto(resp.placement());
  if (!table.ok()) return table.status();
  RouterLoadReport r{resp.router_id(), *std::move(table), {}, {}};
  r.expert_tokens.assign(resp.expert_load().tokens().begin(), resp.expert_load().tokens().end());
  for (const rpb::WorkerLoad& w : resp.expert_load().workers()) {
    r.worker_tokens[w.worker_id()].assign(w.tokens().begin(), w.tokens().end());
  }
  return r;
}

absl::Status GrpcRecalibrationTransport::SetPlacement(int router, const PlacementTable& table) {
  rpb::SetPlacementRequest req;
  PlacementToProto(table, req.mutable_placement());
  rpb::SetPlacementResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return Prefixed(common::rpc::FromGrpcStatus(stubs_[router]->SetPlacement(&ctx, req, &resp)),
                  routers_[router], "SetPlacement");
}

absl::Status GrpcRecalibrationTransport::LoadExperts(const std::string& address,
                                                     const std::vector<model::ExpertKey>& keys) {
  auto ch = common::rpc::CreateChannel(address, options_.channel);
  if (!ch.ok()) return ch.status();
  auto stub = wpb::ExpertWorker::NewStub(*ch);
  wpb::LoadExpertsRequest req;
  AddKeys(keys, &req);
  wpb::LoadExpertsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return Prefixed(common::rpc::FromGrpcStatus(stub->LoadExperts(&ctx, req, &resp)), address,
                  "LoadExperts");
}

absl::Status GrpcRecalibrationTransport::UnloadExperts(const std::string& address,
                                                       const std::vector<model::ExpertKey>& keys) {
  auto ch = common::rpc::CreateChannel(address, options_.channel);
  if (!ch.ok()) return ch.status();
  auto stub = wpb::ExpertWorker::NewStub(*ch);
  wpb::UnloadExpertsRequest req;
  AddKeys(keys, &req);
  wpb::UnloadExpertsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  return Prefixed(common::rpc::FromGrpcStatus(stub->UnloadExperts(&ctx, req, &resp)), address,
                  "UnloadExperts");
}

}  // namespace moe::router
