#include "common/grpc/server_runner.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/testing/test_pki.h"
#include "common/testing/fault_proxy.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/client_context.h"
#include "gtest/gtest.h"
#include "moe/kv_store/v1/kv_store.grpc.pb.h"

namespace moe::common::rpc {
namespace {

using ::moe::common::testing::FaultProxy;
using ::moe::common::testing::IsOkAndHolds;
using ::moe::common::testing::StatusIs;
using ::moe::kv_store::v1::KvStore;
using ::testing::HasSubstr;

// A fake service: Stats answers at once; Lookup blocks until released (or cancelled), to stand
// for an in-flight call during a drain.
class FakeKvStore final : public KvStore::Service {
 public:
  ::grpc::Status Stats(::grpc::ServerContext*, const kv_store::v1::StatsRequest*,
                       kv_store::v1::StatsResponse* res) override {
    res->set_corrupt_blocks_dropped(7);
    return ::grpc::Status::OK;
  }
  ::grpc::Status Lookup(::grpc::ServerContext* ctx, const kv_store::v1::LookupRequest*,
                        kv_store::v1::LookupResponse* res) override {
    entered_.Notify();
    // Server-side cancellation has no blocking wait in the sync API: check it between waits.
    while (!release_.WaitForNotificationWithTimeout(absl::Milliseconds(5))) {
      if (ctx->IsCancelled()) return ::grpc::Status::CANCELLED;
    }
    res->set_num_cached_blocks(3);
    return ::grpc::Status::OK;
  }
  absl::Notification entered_;
  absl::Notification release_;
};

ServerOptions Loopback() { return {.host = "127.0.0.1", .port = 0}; }

std::unique_ptr<KvStore::Stub> Stub(int port, const ChannelOptions& options = {}) {
  auto channel = CreateChannel("127.0.0.1:" + std::to_string(port), options);
  return channel.ok() ? KvStore::NewStub(*channel) : nullptr;
}

::grpc::Status CallStats(KvStore::Stub& stub, kv_store::v1::StatsResponse* res) {
  ::grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  return stub.Stats(&ctx, kv_store::v1::StatsRequest(), res);
}

TEST(ServerRunnerTest, ServesOnAChosenPort) {
  FakeKvStore service;
  ServerRunner runner(Loopback());
  runner.AddService(&service, KvStore::service_full_name());
  ASSERT_OK(runner.Start());
  ASSERT_GT(runner.port(), 0);
  auto stub = Stub(runner.port());
  kv_store::v1::StatsResponse res;
  ASSERT_TRUE(CallStats(*stub, &res).ok());
  EXPECT_EQ(res.corrupt_blocks_dropped(), 7u);
}

TEST(ServerRunnerTest, HealthIsNotServingUntilTheServiceSaysSo) {
  FakeKvStore service;
  ServerRunner runner(Loopback());
  runner.AddService(&service, KvStore::service_full_name());
  ASSERT_OK(runner.Start());
  ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel("127.0.0.1:" + std::to_string(runner.port())));
  EXPECT_THAT(CheckServing(*channel), IsOkAndHolds(false));
  EXPECT_THAT(CheckServing(*channel, "moe.kv_store.v1.KvStore"), IsOkAndHolds(false));
  runner.SetServing(true);
  EXPECT_THAT(CheckServing(*channel), IsOkAndHolds(true));
  EXPECT_THAT(CheckServing(*channel, "moe.kv_store.v1.KvStore"), IsOkAndHolds(true));
  EXPECT_THAT(CheckServing(*channel, "moe.nope.v1.Nope"), StatusIs(absl::StatusCode::kNotFound));
  runner.SetServing(false);
  EXPECT_THAT(CheckServing(*channel), IsOkAndHolds(false));
}

TEST(ServerRunnerTest, ShutdownLetsInFlightCallsFinish) {
  FakeKvStore service;
  ServerRunner runner(Loopback());
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  runner.SetServing(true);
  ASSERT_OK_AND_ASSIGN(auto channel, CreateChannel("127.0.0.1:" + std::to_string(runner.port())));
  auto stub = KvStore::NewStub(channel);

  ::grpc::Status call_status;
  kv_store::v1::LookupResponse res;
  std::thread caller([&] {
    ::grpc::ClientContext ctx;
    call_status = stub->Lookup(&ctx, kv_store::v1::LookupRequest(), &res);
  });
  service.entered_.WaitForNotification();

  const absl::Time start = absl::Now();
  std::thread stopper([&] { runner.Shutdown(absl::Now() + absl::Seconds(20)); });
  // Once draining, the server reports NOT_SERVING, then refuses new calls.
  while (CheckServing(*channel).value_or(false)) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  service.release_.Notify();
  caller.join();
  stopper.join();
  EXPECT_TRUE(call_status.ok()) << call_status.error_message();
  EXPECT_EQ(res.num_cached_blocks(), 3);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // Did not wait for the drain deadline.
  runner.Wait();                                      // Returns at once: already stopped.
}

TEST(ServerRunnerTest, ShutdownCancelsCallsStillRunningAtTheDeadline) {
  FakeKvStore service;
  ServerRunner runner(ServerOptions{.host = "127.0.0.1", .drain_timeout = absl::Milliseconds(200)});
  runner.AddService(&service);
  ASSERT_OK(runner.Start());
  auto stub = Stub(runner.port());
  ::grpc::Status call_status;
  std::thread caller([&] {
    ::grpc::ClientContext ctx;
    kv_store::v1::LookupResponse res;
    call_status = stub->Lookup(&ctx, kv_store::v1::LookupRequest(), &res);
  });
  service.entered_.WaitForNotification();
  const absl::Time start = absl::Now();
  runner.Shutdown();  // drain_timeout from the options.
  const absl::Duration took = absl::Now() - start;
  caller.join();
  EXPECT_FALSE(call_status.ok());
  EXPECT_GE(took, absl::Milliseconds(190));
  EXPECT_LT(took, absl::Seconds(5));
  runner.Shutdown();  // Idempotent.
}

TEST(ServerRunnerTest, PortInUseIsUnavailable) {
  FakeKvStore service;
  ServerRunner first(Loopback());
  first.AddService(&service);
  ASSERT_OK(first.Start());
  ServerRunner second(ServerOptions{.host = "127.0.0.1", .port = first.port()});
  second.AddService(&service);
  EXPECT_THAT(second.Start(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("cannot listen")));
}

TEST(ServerRunnerTest, RejectsInvalidOptionsAndASecondStart) {
  ServerRunner bad(ServerOptions{.port = 70000});
  EXPECT_THAT(bad.Start(), StatusIs(absl::StatusCode::kInvalidArgument,
                                    "port: 70000 is out of range [0, 65535]"));
  ServerRunner no_key(ServerOptions{.host = "127.0.0.1", .tls = {.cert_file = "x.pem"}});
  EXPECT_THAT(no_key.Start(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tls.key_file")));
  ServerRunner missing(ServerOptions{
      .host = "127.0.0.1", .tls = {.cert_file = "/nonexistent.pem", .key_file = "/k.pem"}});
  EXPECT_THAT(missing.Start(),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent.pem")));
  ServerRunner empty(Loopback());
  EXPECT_THAT(empty.Start(),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no service")));
  FakeKvStore service;
  ServerRunner twice(Loopback());
  twice.AddService(&service);
  ASSERT_OK(twice.Start());
  EXPECT_THAT(twice.Start(), StatusIs(absl::StatusCode::kFailedPrecondition));
}

// Certificates made at test time (testing/test_pki.h): a CA, a server certificate for localhost
// and a client certificate.
class ServerRunnerTlsTest : public ::testing::Test {
 protected:
  ServerRunnerTlsTest() : dir_(MakeDir()), pki_(dir_) {
    ca_ = pki_.Ca("cluster");
    server_ = pki_.Issue(ca_, "server", {"DNS:localhost", "IP:127.0.0.1"});
    client_ = pki_.Issue(ca_, "client", {"DNS:client.moe"});
  }
  ~ServerRunnerTlsTest() override { std::filesystem::remove_all(dir_); }
  static std::string MakeDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "moe-tls-XXXXXX").string();
    return ::mkdtemp(tmpl.data());
  }
  ServerOptions TlsServer(bool require_client_cert) {
    return {.host = "127.0.0.1",
            .tls = {.cert_file = server_.cert_file,
                    .key_file = server_.key_file,
                    .client_ca_file = require_client_cert ? ca_.cert_file : "",
                    .require_client_cert = require_client_cert}};
  }
  ChannelOptions TlsClient(bool with_cert) {
    return {.tls = {.enabled = true,
                    .ca_file = ca_.cert_file,
                    .cert_file = with_cert ? client_.cert_file : "",
                    .key_file = with_cert ? client_.key_file : "",
                    .server_name_override = "localhost"}};
  }
  const std::string dir_;
  testing::TestPki pki_;
  testing::CertFiles ca_, server_, client_;
  FakeKvStore service_;
};

TEST_F(ServerRunnerTlsTest, TlsClientConnectsAndPlaintextClientDoesNot) {
  ServerRunner runner(TlsServer(/*require_client_cert=*/false));
  runner.AddService(&service_);
  ASSERT_OK(runner.Start());
  kv_store::v1::StatsResponse res;
  EXPECT_TRUE(CallStats(*Stub(runner.port(), TlsClient(/*with_cert=*/false)), &res).ok());
  EXPECT_EQ(CallStats(*Stub(runner.port()), &res).error_code(), ::grpc::StatusCode::UNAVAILABLE);
}

TEST_F(ServerRunnerTlsTest, MutualTlsNeedsAClientCertificate) {
  ServerRunner runner(TlsServer(/*require_client_cert=*/true));
  runner.AddService(&service_);
  ASSERT_OK(runner.Start());
  kv_store::v1::StatsResponse res;
  EXPECT_TRUE(CallStats(*Stub(runner.port(), TlsClient(/*with_cert=*/true)), &res).ok());
  EXPECT_FALSE(CallStats(*Stub(runner.port(), TlsClient(/*with_cert=*/false)), &res).ok());
}

TEST(ChannelFactoryTest, RejectsBadClientOptions) {
  EXPECT_THAT(CreateChannel(""), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(CreateChannel("127.0.0.1:1", {.tls = {.ca_file = "ca.pem"}}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("enabled: false")));
  EXPECT_THAT(CreateChannel("127.0.0.1:1", {.tls = {.enabled = true, .ca_file = "/nope.pem"}}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("ca_file")));
}

// A server behind a FaultProxy: the channel tests dial proxy_->port().
class ChannelThroughProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    runner_.AddService(&service_);
    ASSERT_OK(runner_.Start());
    ASSERT_OK_AND_ASSIGN(proxy_, FaultProxy::Start(runner_.port()));
  }
  FakeKvStore service_;
  ServerRunner runner_{Loopback()};
  std::unique_ptr<FaultProxy> proxy_;
};

// A connection attempt is given connect_timeout, however short the reconnect backoff: each
// chunk through the proxy waits 300 ms, so the server's SETTINGS frame comes after the first
// 100 ms backoff. (gRPC takes its connect timeout from the minimum backoff; when that was set
// to the initial backoff, this first fail-fast call failed UNAVAILABLE: "connection attempt
// timed out before receiving SETTINGS frame", seen with mTLS under ASan beside other tests.)
TEST_F(ChannelThroughProxyTest, ASlowHandshakeIsGivenTheConnectTimeoutNotTheBackoff) {
  proxy_->Set({.mode = FaultProxy::Mode::kDelay, .delay = absl::Milliseconds(300)});
  kv_store::v1::StatsResponse res;
  const ::grpc::Status s = CallStats(
      *Stub(proxy_->port(), {.initial_reconnect_backoff = absl::Milliseconds(100)}), &res);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(res.corrupt_blocks_dropped(), 7);
}

// ...and an attempt that outlives connect_timeout fails, so a fail-fast call to a peer that
// accepts and never answers ends UNAVAILABLE, not DEADLINE_EXCEEDED at its own 5 s deadline.
TEST_F(ChannelThroughProxyTest, AnAttemptPastTheConnectTimeoutFailsTheCall) {
  proxy_->Set({.mode = FaultProxy::Mode::kBlackHole});
  kv_store::v1::StatsResponse res;
  const ::grpc::Status s =
      CallStats(*Stub(proxy_->port(), {.connect_timeout = absl::Milliseconds(200)}), &res);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

}  // namespace
}  // namespace moe::common::rpc
