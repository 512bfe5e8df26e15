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
