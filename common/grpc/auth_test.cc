#include "common/grpc/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/grpc/channel_factory.h"
#include "common/grpc/server_runner.h"
#include "common/grpc/testing/method_policy.h"
#include "common/grpc/testing/test_pki.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "moe/kv_store/v1/kv_store.grpc.pb.h"

namespace moe::common::rpc {
namespace {

using ::moe::common::testing::StatusIs;
using ::moe::kv_store::v1::KvStore;
using ::testing::HasSubstr;
namespace pb = ::moe::kv_store::v1;

constexpr MethodPolicy kStats{"Stats", {Role::kAdmin}};
constexpr MethodPolicy kLookup{"Lookup", {Role::kRouter, Role::kAdmin}};
constexpr MethodPolicy kPut{"Put", {Role::kRouter}};
constexpr MethodPolicy kGet{"Get", {Role::kRouter}};
constexpr MethodPolicy kPolicies[] = {kStats, kLookup, kPut, kGet};

// A service whose handlers start with the check, as every real one does.
class GuardedKvStore final : public KvStore::Service {
 public:
  explicit GuardedKvStore(const Authorizer& auth) : auth_(auth) {}
  ::grpc::Status Stats(::grpc::ServerContext* ctx, const pb::StatsRequest*,
                       pb::StatsResponse* res) override {
    if (::grpc::Status s = auth_.Check(*ctx, kStats); !s.ok()) return s;
    res->set_corrupt_blocks_dropped(7);
    return ::grpc::Status::OK;
  }
  ::grpc::Status Lookup(::grpc::ServerContext* ctx, const pb::LookupRequest*,
                        pb::LookupResponse*) override {
    return auth_.Check(*ctx, kLookup);
  }
  ::grpc::Status Put(::grpc::ServerContext* ctx, const pb::PutRequest*, pb::PutResponse*) override {
    return auth_.Check(*ctx, kPut);
  }
  ::grpc::Status Get(::grpc::ServerContext* ctx, const pb::GetRequest*, pb::GetResponse*) override {
    return auth_.Check(*ctx, kGet);
  }

 private:
  const Authorizer& auth_;
};

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

class AuthTest : public ::testing::Test {
 protected:
  AuthTest() : dir_(MakeDir()), pki_(dir_) {
    cluster_ca_ = pki_.Ca("cluster");
    other_ca_ = pki_.Ca("other");
    server_ = pki_.Issue(cluster_ca_, "server", {"DNS:localhost"});
    gateway_ = pki_.Issue(cluster_ca_, "gateway", {"URI:spiffe://moe.test/gateway"});
    admin_ = pki_.Issue(cluster_ca_, "admin", {"URI:spiffe://moe.test/admin", "DNS:admin.moe"});
    // The admin's identity, signed by a CA the cluster does not trust.
    impostor_ = pki_.Issue(other_ca_, "impostor", {"URI:spiffe://moe.test/admin"});
    // The server's own copy of the CA that signs clients (rotated by one test).
    client_ca_file_ = dir_ + "/client-ca.pem";
    std::filesystem::copy_file(cluster_ca_.cert_file, client_ca_file_);
  }
  ~AuthTest() override { std::filesystem::remove_all(dir_); }

  static std::string MakeDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "moe-auth-XXXXXX").string();
    return ::mkdtemp(tmpl.data());
  }

  ServerOptions MtlsServer() {
    ServerOptions o{.host = "127.0.0.1",
                    .tls = {.cert_file = server_.cert_file,
                            .key_file = server_.key_file,
                            .client_ca_file = client_ca_file_,
                            .require_client_cert = true,
                            .reload_interval = absl::Seconds(1)}};
    o.auth.enabled = true;
    o.auth.gateway.identities = {"spiffe://moe.test/gateway"};
    o.auth.router.identities = {"spiffe://moe.test/router"};
    o.auth.admin.identities = {"spiffe://moe.test/admin"};
    return o;
  }

  ChannelOptions Client(const testing::CertFiles* cert) {
    ChannelOptions o{.tls = {.enabled = true,
                             .ca_file = cluster_ca_.cert_file,
                             .server_name_override = "localhost"}};
    if (cert != nullptr) {
      o.tls.cert_file = cert->cert_file;
      o.tls.key_file = cert->key_file;
    }
    return o;
  }

  // Starts a server with `options`, guarded by an Authorizer made from options.auth.
  void Start(const ServerOptions& options) {
    absl::StatusOr<std::unique_ptr<Authorizer>> auth =
        Authorizer::Create(options.auth, "kv-store", registry_, clock_);
    ASSERT_TRUE(auth.ok()) << auth.status();
    auth_ = std::move(*auth);
    service_ = std::make_unique<GuardedKvStore>(*auth_);
    runner_ = std::make_unique<ServerRunner>(options);
    runner_->AddService(service_.get());
    ASSERT_OK(runner_->Start());
  }

  std::shared_ptr<::grpc::Channel> Channel(const ChannelOptions& options) {
    absl::StatusOr<std::shared_ptr<::grpc::Channel>> ch =
        CreateChannel("127.0.0.1:" + std::to_string(runner_->port()), options);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return ch.ok() ? *ch : nullptr;
  }

  ::grpc::Status Stats(const ChannelOptions& options) {
    auto stub = KvStore::NewStub(Channel(options));
    ::grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    pb::StatsResponse res;
    return stub->Stats(&ctx, pb::StatsRequest(), &res);
  }

  double Refused(const std::string& method, const std::string& code) {
    absl::StatusOr<double> v = registry_.Value(
        "moe_rpc_refused_total", {{"service", "kv-store"}, {"method", method}, {"code", code}});
    return v.ok() ? *v : 0;
  }

  const std::string dir_;
  testing::TestPki pki_;
  testing::CertFiles cluster_ca_, other_ca_, server_, gateway_, admin_, impostor_;
  std::string client_ca_file_;
  metrics::Registry registry_;
  common::testing::FakeClock clock_;
  std::unique_ptr<Authorizer> auth_;
  std::unique_ptr<GuardedKvStore> service_;
  std::unique_ptr<ServerRunner> runner_;
};

TEST_F(AuthTest, MtlsRefusesPlaintextAndForeignCertificatesBeforeAnyHandlerRuns) {
  Start(MtlsServer());
  EXPECT_EQ(Stats(ChannelOptions{}).error_code(), ::grpc::StatusCode::UNAVAILABLE);  // plaintext
  EXPECT_EQ(Stats(Client(nullptr)).error_code(), ::grpc::StatusCode::UNAVAILABLE);   // no cert
  // A certificate naming the admin, from another CA: the handshake fails.
  EXPECT_EQ(Stats(Client(&impostor_)).error_code(), ::grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(Stats(Client(&admin_)).ok());
}

TEST_F(AuthTest, AValidCertificateWithTheWrongRoleIsDeniedAndCounted) {
  Start(MtlsServer());
  const ::grpc::Status denied = Stats(Client(&gateway_));
  EXPECT_EQ(denied.error_code(), ::grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("needs role admin; the caller holds gateway"));
  EXPECT_EQ(Refused("Stats", "PERMISSION_DENIED"), 1);
  EXPECT_TRUE(Stats(Client(&admin_)).ok());
  EXPECT_EQ(Refused("Stats", "PERMISSION_DENIED"), 1);
}

TEST_F(AuthTest, EveryMethodServesOnlyItsRoles) {
  Start(MtlsServer());
  testing::CertFiles router = pki_.Issue(cluster_ca_, "router", {"URI:spiffe://moe.test/router"});
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          KvStore::service_full_name());
  ASSERT_NE(service, nullptr);
  testing::ExpectOnlyAllowedMethodsServed(*Channel(Client(&gateway_)), *service, kPolicies,
                                          {Role::kGateway}, ::grpc::StatusCode::PERMISSION_DENIED);
  testing::ExpectOnlyAllowedMethodsServed(*Channel(Client(&router)), *service, kPolicies,
                                          {Role::kRouter}, ::grpc::StatusCode::PERMISSION_DENIED);
  testing::ExpectOnlyAllowedMethodsServed(*Channel(Client(&admin_)), *service, kPolicies,
                                          {Role::kAdmin}, ::grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, ARotatedClientCaIsPickedUpWithoutARestart) {
  Start(MtlsServer());
  // The cluster moves to a new CA: the admin gets a certificate from it, and the server's CA
  // file is rewritten in place (as cert-manager does). No restart.
  testing::CertFiles next_ca = pki_.Ca("next");
  testing::CertFiles next_admin =
      pki_.Issue(next_ca, "admin-next", {"URI:spiffe://moe.test/admin"});
  EXPECT_EQ(Stats(Client(&next_admin)).error_code(), ::grpc::StatusCode::UNAVAILABLE);
  std::filesystem::copy_file(next_ca.cert_file, client_ca_file_,
                             std::filesystem::copy_options::overwrite_existing);
  // gRPC re-reads the files every reload_interval (1 s here).
  const absl::Time deadline = absl::Now() + absl::Seconds(15);
  ::grpc::Status status;
  do {
    absl::SleepFor(absl::Milliseconds(200));
    status = Stats(Client(&next_admin));
  } while (!status.ok() && absl::Now() < deadline);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // The old CA no longer signs anyone in.
  EXPECT_EQ(Stats(Client(&admin_)).error_code(), ::grpc::StatusCode::UNAVAILABLE);
}

TEST_F(AuthTest, ATokenFromAFileGrantsItsRoleAndIsRevokedWhenTheFileChanges) {
  const std::string token_file = dir_ + "/admin.token";
  WriteFile(token_file, "first-admin-token\n");
  ServerOptions o{.host = "127.0.0.1"};
  o.auth.enabled = true;
  o.auth.admin.token_files = {token_file};
  o.auth.token_reload_interval = absl::Seconds(5);
  Start(o);

  const std::string client_token = dir_ + "/client.token";
  WriteFile(client_token, "first-admin-token");
  EXPECT_TRUE(Stats({.token_file = client_token}).ok());
  EXPECT_EQ(Stats(ChannelOptions{}).error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  WriteFile(dir_ + "/wrong.token", "first-admin-tokem");
  EXPECT_EQ(Stats({.token_file = dir_ + "/wrong.token"}).error_code(),
            ::grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Refused("Stats", "UNAUTHENTICATED"), 2);

  // Rotation: the server's file gets a new token. Within the reload interval the old one is
  // still the one on record; after it, the old token is refused and the new one served.
  WriteFile(token_file, "second-admin-token");
  clock_.Advance(absl::Seconds(6));
  EXPECT_EQ(Stats({.token_file = client_token}).error_code(), ::grpc::StatusCode::UNAUTHENTICATED);
  WriteFile(client_token, "second-admin-token");
  EXPECT_TRUE(Stats({.token_file = client_token}).ok());
}

TEST_F(AuthTest, DisabledServesEveryone) {
  ServerOptions o{.host = "127.0.0.1"};
  Start(o);
  EXPECT_TRUE(Stats(ChannelOptions{}).ok());
  EXPECT_FALSE(auth_->enabled());
}

TEST(AuthOptionsTest, RejectsConfigurationsThatCannotWork) {
  AuthOptions nobody{.enabled = true};
  EXPECT_THAT(nobody.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nobody")));
  ServerOptions ids_without_mtls{.host = "127.0.0.1"};
  ids_without_mtls.auth.enabled = true;
  ids_without_mtls.auth.admin.identities = {"spiffe://moe.test/admin"};
  EXPECT_THAT(ids_without_mtls.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("require_client_cert")));
  AuthOptions missing{.enabled = true};
  missing.admin.token_files = {"/nonexistent/admin.token"};
  metrics::Registry registry;
  common::testing::FakeClock clock;
  EXPECT_THAT(Authorizer::Create(missing, "x", registry, clock),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/admin.token")));
}

TEST(ServerOptionsTest, BindsLoopbackByDefault) { EXPECT_EQ(ServerOptions{}.host, "127.0.0.1"); }

}  // namespace
}  // namespace moe::common::rpc
