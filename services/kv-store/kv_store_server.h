// The kv-store's gRPC face (moe.kv_store.v1.KvStore): proto <-> core conversion and absl -> gRPC
// status. Get is a raw callback method: its response is written with kv_block_wire.h, each
// block's bytes handed to gRPC as a slice over the core's buffer (L2's own memory for an
// uncompressed block, the buffer it was decoded or read into otherwise): no protobuf copy. The
// other methods are synchronous.
#pragma once

#include <string>

#include "common/config/schema.h"
#include "common/grpc/server_runner.h"
#include "common/metrics/metrics_server.h"
#include "moe/kv_store/v1/kv_store.grpc.pb.h"
#include "services/kv-store/core/kv_store_core.h"

namespace moe::kv_store {

// Everything main.cc reads from --config / --set.
struct KvStoreOptions {
  KvStoreCoreOptions core;
  common::rpc::ServerOptions grpc;
  common::metrics::MetricsServerOptions metrics;
  std::string log_level = "info";

  static void Describe(common::config::Schema<KvStoreOptions>& s) {
    s.Section("core", &KvStoreOptions::core);
    s.Section("grpc", &KvStoreOptions::grpc);
    s.Section("metrics", &KvStoreOptions::metrics);
    s.Add("log_level", &KvStoreOptions::log_level, "trace|debug|info|warn|error|off");
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// Thread-safe (gRPC threads call it). Borrows `core`.
class KvStoreServer final : public moe::kv_store::v1::KvStore::WithRawCallbackMethod_Get<
                                moe::kv_store::v1::KvStore::Service> {
 public:
  explicit KvStoreServer(KvStoreCore& core) : core_(core) {}

  // Get, answered on the gRPC thread that read the request.
  ::grpc::ServerUnaryReactor* Get(::grpc::CallbackServerContext* context,
                                  const ::grpc::ByteBuffer* request,
                                  ::grpc::ByteBuffer* response) override;
  // moe::kv_store::v1::KvStore::Service
  ::grpc::Status Put(::grpc::ServerContext* context, const moe::kv_store::v1::PutRequest* request,
                     moe::kv_store::v1::PutResponse* response) override;
  ::grpc::Status Lookup(::grpc::ServerContext* context,
                        const moe::kv_store::v1::LookupRequest* request,
                        moe::kv_store::v1::LookupResponse* response) override;
  ::grpc::Status Stats(::grpc::ServerContext* context,
                       const moe::kv_store::v1::StatsRequest* request,
                       moe::kv_store::v1::StatsResponse* response) override;
  ::grpc::Status GetCachedResponse(::grpc::ServerContext* context,
                                   const moe::kv_store::v1::GetCachedResponseRequest* request,
                                   moe::kv_store::v1::GetCachedResponseResponse* response) override;
  ::grpc::Status PutCachedResponse(::grpc::ServerContext* context,
                                   const moe::kv_store::v1::PutCachedResponseRequest* request,
                                   moe::kv_store::v1::PutCachedResponseResponse* response) override;

 private:
  KvStoreCore& core_;
};

}  // namespace moe::kv_store
