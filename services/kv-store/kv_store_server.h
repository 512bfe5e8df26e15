// The kv-store's gRPC face (moe.kv_store.v1.KvStore): proto <-> core conversion and absl -> gRPC
// status. Get is a raw callback method: its response is written with kv_block_wire.h, each
// block's bytes handed to gRPC as a slice over the core's buffer (L2's own memory for an
// uncompressed block, the buffer it was decoded or read into otherwise): no protobuf copy. The
// other methods are synchronous.
#pragma once

#include <string>

#include "common/config/schema.h"
#include "common/grpc/auth.h"
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

// Who may call each method (common/grpc/auth.h; SECURITY.md): routers store and fetch blocks and
// responses; routers and the admin read stats.
namespace kv_policy {
using common::rpc::MethodPolicy;
using common::rpc::Role;
inline constexpr MethodPolicy kPut{"Put", {Role::kRouter}};
inline constexpr MethodPolicy kGet{"Get", {Role::kRouter}};
inline constexpr MethodPolicy kLookup{"Lookup", {Role::kRouter}};
inline constexpr MethodPolicy kStats{"Stats", {Role::kRouter, Role::kAdmin}};
inline constexpr MethodPolicy kGetCachedResponse{"GetCachedResponse", {Role::kRouter}};
inline constexpr MethodPolicy kPutCachedResponse{"PutCachedResponse", {Role::kRouter}};
}  // namespace kv_policy
inline constexpr common::rpc::MethodPolicy kKvStorePolicies[] = {kv_policy::kPut,
                                                                 kv_policy::kGet,
                                                                 kv_policy::kLookup,
                                                                 kv_policy::kStats,
                                                                 kv_policy::kGetCachedResponse,
                                                                 kv_policy::kPutCachedResponse};

// Thread-safe (gRPC threads call it). Borrows `core` and the authorizer.
class KvStoreServer final : public moe::kv_store::v1::KvStore::WithRawCallbackMethod_Get<
                                moe::kv_store::v1::KvStore::Service> {
 public:
  explicit KvStoreServer(KvStoreCore& core) : core_(core) {}
  // Checks every method's policy with `auth` (main: the Authorizer of grpc.auth). Default: every
  // caller this server accepts (tests of the core behind it).
  void SetAuthorizer(const common::rpc::Authorizer& auth) { auth_ = &auth; }

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
  ::grpc::Status Check(const ::grpc::ServerContextBase& context,
                       const common::rpc::MethodPolicy& policy) const {
    return auth_ == nullptr ? ::grpc::Status::OK : auth_->Check(context, policy);
  }

  KvStoreCore& core_;
  const common::rpc::Authorizer* auth_ = nullptr;
};

}  // namespace moe::kv_store
