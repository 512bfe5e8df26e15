#include "services/expert-worker/expert_worker_server.h"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc/status.h"

namespace moe::expert_worker {
namespace pb = ::moe::expert_worker::v1;

namespace {

template <typename Resp>
void FillResident(const ResidentSet& r, Resp* response) {
  for (const ExpertKey& k : r.experts) {
    pb::ExpertKey* key = response->add_resident();
    key->set_layer_idx(static_cast<int32_t>(k.layer));
    key->set_expert_id(static_cast<int32_t>(k.expert));
  }
  response->set_resident_bytes(static_cast<uint64_t>(r.bytes));
}

std::vector<ExpertKey> KeysFromProto(
    const google::protobuf::RepeatedPtrField<pb::ExpertKey>& keys) {
  std::vector<ExpertKey> out;
  for (const pb::ExpertKey& k : keys) out.push_back({k.layer_idx(), k.expert_id()});
  return out;
}

// Checks `request` and builds the core call over its activations (read in place) and the
// response's output bytes (written in place).
::grpc::Status BuildCall(const ExpertWorkerCore& core, const pb::RunExpertsRequest& request,
                         pb::RunExpertsResponse* response, engine::ExpertCall* call) {
  const int64_t hidden = core.config().hidden_size;
  const kernels::Activations mode = request.activations() == pb::ACTIVATIONS_BF16
                                        ? kernels::Activations::kBf16
                                        : kernels::Activations::kF32;
  if (request.activations() != pb::ACTIVATIONS_F32 &&
      request.activations() != pb::ACTIVATIONS_BF16) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("unknown activations mode ", request.activations()));
  }
  if (absl::Status s = core.CheckActivations(mode); !s.ok()) return common::rpc::ToGrpcStatus(s);
  call->activations = mode;
  if (request.weights() != pb::WEIGHTS_CHECKPOINT && request.weights() != pb::WEIGHTS_Q8_0) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("unknown weights mode ", request.weights()));
  }
  call->weights = request.weights() == pb::WEIGHTS_Q8_0 ? model::WeightsMode::kQ8_0
                                                        : model::WeightsMode::kCheckpoint;
  if (absl::Status s = core.CheckWeights(call->weights); !s.ok()) {
    return common::rpc::ToGrpcStatus(s);
  }
  call->layer_idx = request.layer_idx();
  call->hidden = hidden;
  call->batches.reserve(static_cast<size_t>(request.batches_size()));
  for (const pb::ExpertBatch& b : request.batches()) {
    const auto& t = b.activations();
    if (t.dtype() != moe::common::v1::DTYPE_F32) {
      return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                            absl::StrCat("expert ", b.expert_id(), ": activations must be f32"));
    }
    // Rows from the data size (no product of a client's shape: 2^56 + 1 rows would wrap to one).
    const int64_t row_bytes = hidden * 4;
    const int64_t data_bytes = static_cast<int64_t>(t.data().size());
    if (t.shape_size() != 2 || t.shape(0) < 1 || t.shape(1) != hidden ||
        data_bytes % row_bytes != 0 || t.shape(0) != data_bytes / row_bytes) {
      return ::grpc::Status(
          ::grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("expert ", b.expert_id(), ": activations must be [num_tokens >= 1, ", hidden,
                       "] f32 with matching data size"));
    }
    pb::ExpertOutput* out = response->add_outputs();
    out->set_expert_id(b.expert_id());
    auto* o = out->mutable_outputs();
    o->set_dtype(moe::common::v1::DTYPE_F32);
    o->add_shape(t.shape(0));
    o->add_shape(hidden);
    std::string* data = o->mutable_data();
    data->resize(t.data().size());
    call->batches.push_back({b.expert_id(), t.shape(0),
                             reinterpret_cast<const float*>(t.data().data()),
                             reinterpret_cast<float*>(data->data())});
  }
  return ::grpc::Status::OK;
}

::grpc::Status Finished(absl::Status status, absl::Duration compute,
                        pb::RunExpertsResponse* response) {
  if (!status.ok()) {
    response->Clear();
    return common::rpc::ToGrpcStatus(status);
  }
  response->set_compute_us(static_cast<uint64_t>(absl::ToInt64Microseconds(compute)));
  return ::grpc::Status::OK;
}

}  // namespace

::grpc::Status HandleRunExperts(ExpertWorkerCore& core, const pb::RunExpertsRequest& request,
                                pb::RunExpertsResponse* response) {
  engine::ExpertCall call;
  if (::grpc::Status s = BuildCall(core, request, response, &call); !s.ok()) {
    response->Clear();
    return s;
  }
  absl::Duration compute;
  absl::Status s = core.Run(call, &compute);
  return Finished(std::move(s), compute, response);
}

::grpc::ServerUnaryReactor* ExpertWorkerServer::RunExperts(::grpc::CallbackServerContext* context,
                                                           const pb::RunExpertsRequest* request,
                                                           pb::RunExpertsResponse* response) {
  ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (::grpc::Status s = Check(*context, kRunExpertsPolicy); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  engine::ExpertCall call;
  if (::grpc::Status s = BuildCall(*core_, *request, response, &call); !s.ok()) {
    response->Clear();
    reactor->Finish(s);
    return reactor;
  }
  // The request and response live until Finish; `done` runs here or on a core slot thread.
  core_->RunAsync(call, [reactor, response](absl::Status status, absl::Duration compute) {
    reactor->Finish(Finished(std::move(status), compute, response));
  });
  return reactor;
}

::grpc::Status ExpertWorkerServer::LoadExperts(::grpc::ServerContext* context,
                                               const pb::LoadExpertsRequest* request,
                                               pb::LoadExpertsResponse* response) {
  if (::grpc::Status s = Check(*context, kLoadExpertsPolicy); !s.ok()) return s;
  if (request->experts_size() == 0) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT, "LoadExperts: no experts");
  }
  auto r = core_->Load(KeysFromProto(request->experts()));
  if (!r.ok()) return common::rpc::ToGrpcStatus(r.status());
  FillResident(*r, response);
  return ::grpc::Status::OK;
}

::grpc::Status ExpertWorkerServer::UnloadExperts(::grpc::ServerContext* context,
                                                 const pb::UnloadExpertsRequest* request,
                                                 pb::UnloadExpertsResponse* response) {
  if (::grpc::Status s = Check(*context, kUnloadExpertsPolicy); !s.ok()) return s;
  FillResident(core_->Unload(KeysFromProto(request->experts())), response);
  return ::grpc::Status::OK;
}

::grpc::Status ExpertWorkerServer::NegotiateTransport(::grpc::ServerContext* context,
                                                      const pb::NegotiateTransportRequest* request,
                                                      pb::NegotiateTransportResponse* response) {
  if (::grpc::Status s = Check(*context, kNegotiateTransportPolicy); !s.ok()) return s;
  if (absl::Status s = authorizer_(*context); !s.ok()) return common::rpc::ToGrpcStatus(s);
  auto grpc_only = [response](absl::string_view reason) {
    response->mutable_grpc()->set_reason(std::string(reason));
    return ::grpc::Status::OK;
  };
  const auto& accept = request->accept();
  const auto shm_at = std::find(accept.begin(), accept.end(), pb::TRANSPORT_KIND_SHARED_MEMORY);
  const auto nccl_at = std::find(accept.begin(), accept.end(), pb::TRANSPORT_KIND_NCCL);
  std::string nccl_reason;
  // NCCL when the caller lists it before shared memory (or without it) and the worker can join.
  if (nccl_at != accept.end() && nccl_at < shm_at) {
    if (nccl_ == nullptr) {
      nccl_reason = "nccl is disabled on this worker";
    } else if (absl::StatusOr<NcclOffer> offer = nccl_->Offer(); offer.ok()) {
      pb::NcclTransport* t = response->mutable_nccl();
      t->set_unique_id(nccl::UniqueIdToBytes(offer->unique_id));
      t->set_num_ranks(offer->num_ranks);
      t->set_worker_rank(offer->worker_rank);
      t->set_caller_rank(offer->caller_rank);
      return ::grpc::Status::OK;
    } else {
      nccl_reason = std::string(offer.status().message());
    }
  }
  auto grpc_after_nccl = [&](absl::string_view reason) {
    return grpc_only(nccl_reason.empty() ? std::string(reason)
                                         : absl::StrCat(nccl_reason, "; ", reason));
  };
  if (shm_at == accept.end()) {
    return grpc_after_nccl(nccl_at == accept.end() ? "the caller accepts gRPC only"
                                                   : "the caller accepts no shared memory");
  }
  if (shm_ == nullptr) {
    return grpc_after_nccl("shared memory is disabled on this worker (shm.enabled)");
  }
  if (!boot_id_.empty() && !request->boot_id().empty() && request->boot_id() != boot_id_) {
    return grpc_after_nccl("the caller runs on another host");
  }
  absl::StatusOr<ShmServer::Offer> offer = shm_->IssueTicket();
  if (!offer.ok()) return grpc_after_nccl(offer.status().message());
  pb::SharedMemoryTransport* t = response->mutable_shared_memory();
  t->set_socket_path(offer->socket_path);
  t->set_ticket(offer->ticket);
  t->set_ring_bytes(offer->ring_bytes);
  t->set_worker_pid(static_cast<uint32_t>(getpid()));
  return ::grpc::Status::OK;
}

}  // namespace moe::expert_worker
