#include "common/grpc/testing/method_policy.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/completion_queue.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"

namespace moe::common::rpc::testing {
namespace {

const MethodPolicy* Find(std::span<const MethodPolicy> policies, std::string_view method) {
  for (const MethodPolicy& p : policies) {
    if (p.method == method) return &p;
  }
  return nullptr;
}

::grpc::Status CallWithEmptyRequest(::grpc::Channel& channel, const std::string& path) {
  std::shared_ptr<::grpc::Channel> borrowed(std::shared_ptr<::grpc::Channel>(), &channel);
  ::grpc::GenericStub stub(borrowed);
  ::grpc::CompletionQueue cq;
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  ::grpc::ByteBuffer request;  // an empty message: every field at its default
  ::grpc::Slice empty("", 0);
  request = ::grpc::ByteBuffer(&empty, 1);
  std::unique_ptr<::grpc::GenericClientAsyncResponseReader> call =
      stub.PrepareUnaryCall(&ctx, path, request, &cq);
  call->StartCall();
  ::grpc::ByteBuffer response;
  ::grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  EXPECT_TRUE(cq.Next(&tag, &ok));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

}  // namespace

void ExpectPolicyCoversService(const google::protobuf::ServiceDescriptor& service,
                               std::span<const MethodPolicy> policies) {
  for (int i = 0; i < service.method_count(); ++i) {
    const std::string& name = service.method(i)->name();
    const MethodPolicy* p = Find(policies, name);
    EXPECT_NE(p, nullptr) << service.full_name() << "." << name << " has no MethodPolicy";
    if (p != nullptr) {
      EXPECT_FALSE(p->allowed.empty()) << name << ": a policy allows some role";
    }
  }
  for (const MethodPolicy& p : policies) {
    EXPECT_NE(service.FindMethodByName(std::string(p.method)), nullptr)
        << "policy for " << p.method << ", which " << service.full_name() << " does not have";
  }
}

void ExpectOnlyAllowedMethodsServed(::grpc::Channel& channel,
                                    const google::protobuf::ServiceDescriptor& service,
                                    std::span<const MethodPolicy> policies, RoleSet caller,
                                    ::grpc::StatusCode refused_code) {
  for (int i = 0; i < service.method_count(); ++i) {
    const std::string& name = service.method(i)->name();
    const MethodPolicy* p = Find(policies, name);
    if (p == nullptr) continue;  // ExpectPolicyCoversService reports it
    const std::string path = absl::StrCat("/", service.full_name(), "/", name);
    const ::grpc::Status status = CallWithEmptyRequest(channel, path);
    if (p->allowed.intersects(caller)) {
      EXPECT_NE(status.error_code(), ::grpc::StatusCode::UNAUTHENTICATED)
          << path << " refused a caller with " << caller.ToString() << ": "
          << status.error_message();
      EXPECT_NE(status.error_code(), ::grpc::StatusCode::PERMISSION_DENIED)
          << path << " refused a caller with " << caller.ToString() << ": "
          << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), refused_code)
          << path << " (allows " << p->allowed.ToString() << ") served a caller with "
          << caller.ToString() << ": " << status.error_code() << " " << status.error_message();
    }
  }
}

}  // namespace moe::common::rpc::testing

namespace moe::common::rpc::testing {

ClusterPki::ClusterPki(const std::string& dir) {
  TestPki pki(dir);
  ca_ = pki.Ca("cluster");
  server_ = pki.Issue(ca_, "server", {"DNS:localhost", "IP:127.0.0.1"});
  for (int r = 0; r < kNumRoles; ++r) {
    const std::string name(RoleName(static_cast<Role>(r)));
    roles_.push_back(pki.Issue(ca_, name, {"URI:spiffe://moe.test/" + name}));
  }
  CertFiles other = pki.Ca("other");
  impostor_ = pki.Issue(other, "impostor", {"URI:spiffe://moe.test/admin"});
}

ServerOptions ClusterPki::Server() const {
  ServerOptions o{.host = "127.0.0.1",
                  .tls = {.cert_file = server_.cert_file,
                          .key_file = server_.key_file,
                          .client_ca_file = ca_.cert_file,
                          .require_client_cert = true}};
  o.auth.enabled = true;
  o.auth.gateway.identities = {"spiffe://moe.test/gateway"};
  o.auth.router.identities = {"spiffe://moe.test/router"};
  o.auth.admin.identities = {"spiffe://moe.test/admin"};
  return o;
}

ChannelOptions ClusterPki::Client(std::optional<Role> role) const {
  ChannelOptions o{
      .tls = {.enabled = true, .ca_file = ca_.cert_file, .server_name_override = "localhost"}};
  if (role.has_value()) {
    o.tls.cert_file = roles_[static_cast<int>(*role)].cert_file;
    o.tls.key_file = roles_[static_cast<int>(*role)].key_file;
  }
  return o;
}

ChannelOptions ClusterPki::Impostor() const {
  ChannelOptions o = Client(std::nullopt);
  o.tls.cert_file = impostor_.cert_file;
  o.tls.key_file = impostor_.key_file;
  return o;
}

void ClusterPki::ExpectEveryMethodGuarded(const std::string& target,
                                          const google::protobuf::ServiceDescriptor& service,
                                          std::span<const MethodPolicy> policies) const {
  ExpectPolicyCoversService(service, policies);
  auto channel = [&](const ChannelOptions& o) {
    absl::StatusOr<std::shared_ptr<::grpc::Channel>> ch = CreateChannel(target, o);
    EXPECT_TRUE(ch.ok()) << ch.status();
    return *ch;
  };
  // Refused before any handler: every method fails the same way, so one suffices.
  const std::string first = absl::StrCat("/", service.full_name(), "/", service.method(0)->name());
  for (const auto& [who, options] :
       std::vector<std::pair<std::string, ChannelOptions>>{{"plaintext", ChannelOptions{}},
                                                           {"no certificate", Client(std::nullopt)},
                                                           {"another CA", Impostor()}}) {
    EXPECT_EQ(CallWithEmptyRequest(*channel(options), first).error_code(),
              ::grpc::StatusCode::UNAVAILABLE)
        << who << " reached " << first;
  }
  for (int r = 0; r < kNumRoles; ++r) {
    const Role role = static_cast<Role>(r);
    ExpectOnlyAllowedMethodsServed(*channel(Client(role)), service, policies, {role},
                                   ::grpc::StatusCode::PERMISSION_DENIED);
  }
}

}  // namespace moe::common::rpc::testing
