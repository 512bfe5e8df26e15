#include "services/kv-store/kv_store_server.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/grpc/status.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "services/kv-store/kv_block_wire.h"

namespace moe::kv_store {
namespace pb = ::moe::kv_store::v1;

namespace {

constexpr int kMaxHashes = 4096;
constexpr size_t kMaxResponseValue = 16 << 20;

absl::StatusOr<kv::BlockHash> HashFromBytes(const std::string& b) {
  if (b.size() != 16) {
    return absl::InvalidArgumentError(absl::StrCat("a block hash is 16 bytes, got ", b.size()));
  }
  kv::BlockHash h;
  for (int i = 0; i < 8; ++i) h.hi = (h.hi << 8) | static_cast<uint8_t>(b[i]);
  for (int i = 8; i < 16; ++i) h.lo = (h.lo << 8) | static_cast<uint8_t>(b[i]);
  return h;
}

absl::StatusOr<std::vector<kv::BlockHash>> Hashes(
    const google::protobuf::RepeatedPtrField<std::string>& in) {
  if (in.size() > kMaxHashes) {
    return absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxHashes, " hashes per call, got ", in.size()));
  }
  std::vector<kv::BlockHash> out;
  out.reserve(in.size());
  for (const std::string& b : in) {
    absl::StatusOr<kv::BlockHash> h = HashFromBytes(b);
    if (!h.ok()) return h.status();
    out.push_back(*h);
  }
  return out;
}

Fidelity FromProto(pb::KvFidelity f) {
  return f == pb::KV_FIDELITY_LOSSY_INT8 ? Fidelity::kInt8 : Fidelity::kExact;
}

absl::StatusOr<common::DType> DTypeFromProto(moe::common::v1::DType t) {
  switch (t) {
    case moe::common::v1::DTYPE_F32:
      return common::DType::kF32;
    case moe::common::v1::DTYPE_BF16:
      return common::DType::kBF16;
    case moe::common::v1::DTYPE_F16:
      return common::DType::kF16;
    default:
      return absl::InvalidArgumentError("block data needs a dtype");
  }
}

pb::Tier TierToProto(Tier t) {
  return t == Tier::kL2 ? pb::TIER_L2 : t == Tier::kL3 ? pb::TIER_L3 : pb::TIER_UNSPECIFIED;
}

// Keeps a block's buffer alive while gRPC sends the slice over it.
void ReleaseStorage(void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }

::grpc::Slice SliceOver(const Bytes& bytes) {
  auto* keep = new std::shared_ptr<const std::string>(bytes.storage);
  return ::grpc::Slice(const_cast<char*>(bytes.view().data()), bytes.size, ReleaseStorage, keep);
}

}  // namespace

::grpc::ServerUnaryReactor* KvStoreServer::Get(::grpc::CallbackServerContext* context,
                                               const ::grpc::ByteBuffer* request,
                                               ::grpc::ByteBuffer* response) {
  ::grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (::grpc::Status s = Check(*context, kv_policy::kGet); !s.ok()) {
    reactor->Finish(s);
    return reactor;
  }
  pb::GetRequest req;
  {
    ::grpc::ProtoBufferReader reader(const_cast<::grpc::ByteBuffer*>(request));
    if (!req.ParseFromZeroCopyStream(&reader)) {
      reactor->Finish(::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT, "malformed GetRequest"));
      return reactor;
    }
  }
  absl::Status ok = core_.CheckFidelity(FromProto(req.fidelity()));
  absl::StatusOr<std::vector<kv::BlockHash>> hashes = Hashes(req.hashes());
  if (ok.ok()) ok = hashes.status();
  if (!ok.ok()) {
    reactor->Finish(common::rpc::ToGrpcStatus(ok));
    return reactor;
  }
  const std::vector<GotBlock> blocks = core_.Get(*hashes, req.prefix_only());
  std::vector<::grpc::Slice> slices;
  slices.reserve(2 * blocks.size());
  for (const GotBlock& b : blocks) {
    EncodeGetResponseBlock(b.hash, b.dtype, b.dims, b.checksum, TierToProto(b.tier),
                           SliceOver(b.data), &slices);
  }
  *response = ::grpc::ByteBuffer(slices.data(), slices.size());
  reactor->Finish(::grpc::Status::OK);
  return reactor;
}

::grpc::Status KvStoreServer::Put(::grpc::ServerContext* context, const pb::PutRequest* request,
                                  pb::PutResponse* response) {
  if (::grpc::Status s = Check(*context, kv_policy::kPut); !s.ok()) return s;
  if (absl::Status s = core_.CheckFidelity(FromProto(request->fidelity())); !s.ok()) {
    return common::rpc::ToGrpcStatus(s);
  }
  if (request->blocks_size() > kMaxHashes) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("at most ", kMaxHashes, " blocks per Put"));
  }
  std::vector<PutBlock> blocks;
  blocks.reserve(request->blocks_size());
  // The data moves into the core (kept as is when stored uncompressed): the request is gRPC's,
  // allocated for this call and dropped after it, so taking its strings is safe.
  for (const pb::KvBlock& b : request->blocks()) {
    absl::StatusOr<kv::BlockHash> h = HashFromBytes(b.hash());
    if (!h.ok()) return common::rpc::ToGrpcStatus(h.status());
    absl::StatusOr<common::DType> dtype = DTypeFromProto(b.data().dtype());
    if (!dtype.ok()) return common::rpc::ToGrpcStatus(dtype.status());
    PutBlock block{.hash = *h,
                   .dtype = *dtype,
                   .dims = {b.data().shape().begin(), b.data().shape().end()},
                   .checksum = b.checksum()};
    block.data.swap(*const_cast<pb::KvBlock&>(b).mutable_data()->mutable_data());
    blocks.push_back(std::move(block));
  }
  absl::StatusOr<PutResult> r = core_.Put(std::move(blocks));
  if (!r.ok()) return common::rpc::ToGrpcStatus(r.status());
  response->set_num_stored(r->num_stored);
  response->set_num_already_present(r->num_already_present);
  response->set_num_declined(r->num_declined);
  return ::grpc::Status::OK;
}

::grpc::Status KvStoreServer::Lookup(::grpc::ServerContext* context,
                                     const pb::LookupRequest* request,
                                     pb::LookupResponse* response) {
  if (::grpc::Status s = Check(*context, kv_policy::kLookup); !s.ok()) return s;
  if (absl::Status s = core_.CheckFidelity(FromProto(request->fidelity())); !s.ok()) {
    return common::rpc::ToGrpcStatus(s);
  }
  absl::StatusOr<std::vector<kv::BlockHash>> hashes = Hashes(request->hashes());
  if (!hashes.ok()) return common::rpc::ToGrpcStatus(hashes.status());
  const LookupResult r = core_.Lookup(*hashes);
  response->set_num_cached_blocks(r.num_cached_blocks);
  response->set_num_in_l2(r.num_in_l2());
  for (Tier t : r.tiers) response->add_tiers(TierToProto(t));
  return ::grpc::Status::OK;
}

::grpc::Status KvStoreServer::Stats(::grpc::ServerContext* context, const pb::StatsRequest*,
                                    pb::StatsResponse* response) {
  if (::grpc::Status s = Check(*context, kv_policy::kStats); !s.ok()) return s;
  const StoreStats s = core_.Stats();
  for (const TierStats& t : s.tiers) {
    pb::TierStats* out = response->add_tiers();
    out->set_tier(TierToProto(t.tier));
    out->set_blocks_used(t.blocks_used);
    out->set_bytes_used(t.bytes_used);
    out->set_bytes_capacity(t.bytes_capacity);
    out->set_hits(t.hits);
    out->set_misses(t.misses);
    out->set_evictions(t.evictions);
  }
  response->set_corrupt_blocks_dropped(s.corrupt_blocks_dropped);
  response->set_fidelity(s.fidelity == Fidelity::kInt8 ? pb::KV_FIDELITY_LOSSY_INT8
                                                       : pb::KV_FIDELITY_EXACT);
  response->set_compression(s.compression == CompressionMode::kNone   ? "none"
                            : s.compression == CompressionMode::kInt8 ? "int8"
                                                                      : "zstd");
  response->set_l3_queue_bytes(s.l3_queue_bytes);
  response->set_response_entries(s.response_entries);
  response->set_response_bytes(s.response_bytes);
  response->set_response_hits(s.response_hits);
  return ::grpc::Status::OK;
}

::grpc::Status KvStoreServer::GetCachedResponse(::grpc::ServerContext* context,
                                                const pb::GetCachedResponseRequest* request,
                                                pb::GetCachedResponseResponse* response) {
  if (::grpc::Status s = Check(*context, kv_policy::kGetCachedResponse); !s.ok()) return s;
  absl::StatusOr<kv::BlockHash> key = HashFromBytes(request->key());
  if (!key.ok()) return common::rpc::ToGrpcStatus(key.status());
  std::optional<std::string> value = core_.GetResponse(*key);
  response->set_found(value.has_value());
  if (value.has_value()) response->set_value(std::move(*value));
  return ::grpc::Status::OK;
}

::grpc::Status KvStoreServer::PutCachedResponse(::grpc::ServerContext* context,
                                                const pb::PutCachedResponseRequest* request,
                                                pb::PutCachedResponseResponse* response) {
  if (::grpc::Status s = Check(*context, kv_policy::kPutCachedResponse); !s.ok()) return s;
  absl::StatusOr<kv::BlockHash> key = HashFromBytes(request->key());
  if (!key.ok()) return common::rpc::ToGrpcStatus(key.status());
  if (request->value().size() > kMaxResponseValue) {
    return ::grpc::Status(::grpc::StatusCode::INVALID_ARGUMENT, "cached response over 16 MiB");
  }
  response->set_stored(core_.PutResponse(*key, request->value()));
  return ::grpc::Status::OK;
}

}  // namespace moe::kv_store
