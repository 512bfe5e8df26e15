// Lease-based leader election against the in-test API server: one of two candidates leads; the
// other takes over once the leader stops (released) or stops renewing (expired); a 409 on a
// concurrent take leaves one winner. Two operator processes: operator_processes_test.cc.
#include "services/operator/kube/leader_election.h"

#include "common/base/file.h"
#include "common/testing/fake_clock.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/operator/kube/http_kube_client.h"
#include "services/operator/testing/fake_api_server.h"

namespace moe::op::kube {
namespace {

using testing::FakeApiServer;

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start({});
    ASSERT_OK(server.status());
    server_ = *std::move(server);
    KubeConfig c;
    c.host = "127.0.0.1";
    c.port = server_->port();
    c.ca_pem = *common::ReadFile(FakeApiServer::TestCaPath());
    c.token = "test-token";
    client_ = std::make_unique<HttpKubeClient>(c, HttpKubeClientOptions{}, registry_);
  }
  std::unique_ptr<LeaderElector> Candidate(const std::string& id) {
    return std::make_unique<LeaderElector>(
        LeaderElectionOptions{.ns = "moe",
                              .identity = id,
                              .lease_duration = absl::Seconds(15),
                              .renew_deadline = absl::Seconds(10),
                              .retry_period = absl::Seconds(2)},
        *client_, clock_, registry_, nullptr, nullptr);
  }
  std::string Holder() {
    auto l = server_->Get("leases", "moe", "moe-operator");
    return l ? (*l)["spec"].value("holderIdentity", "") : "";
  }

  common::metrics::Registry registry_;
  common::testing::FakeClock clock_;
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<HttpKubeClient> client_;
};

TEST_F(LeaderElectionTest, OneLeadsTheOtherWaitsUntilTheLeaseExpires) {
  auto a = Candidate("a"), b = Candidate("b");
  EXPECT_TRUE(a->TryAcquireOrRenew());
  EXPECT_FALSE(b->TryAcquireOrRenew());
  EXPECT_EQ(Holder(), "a");
  clock_.Advance(absl::Seconds(10));
  EXPECT_TRUE(a->TryAcquireOrRenew());  // renewed
  EXPECT_FALSE(b->TryAcquireOrRenew());
  // a stops renewing: b takes the Lease a lease duration after it last saw a renewal.
  clock_.Advance(absl::Seconds(14));
  EXPECT_FALSE(b->TryAcquireOrRenew());
  clock_.Advance(absl::Seconds(2));
  EXPECT_TRUE(b->TryAcquireOrRenew());
  EXPECT_EQ(Holder(), "b");
  EXPECT_EQ((*server_->Get("leases", "moe", "moe-operator"))["spec"]["leaseTransitions"], 1);
  // a comes back: it sees b renewing and does not take over.
  EXPECT_FALSE(a->TryAcquireOrRenew());
}

TEST_F(LeaderElectionTest, AConcurrentTakeHasOneWinner) {
  auto a = Candidate("a"), b = Candidate("b");
  ASSERT_TRUE(a->TryAcquireOrRenew());
  clock_.Advance(absl::Seconds(1));
  EXPECT_FALSE(b->TryAcquireOrRenew());  // b observes a's record now
  clock_.Advance(absl::Seconds(16));
  // Both see an expired Lease; a 409 (another writer got in between) fails b's update.
  server_->FailNext("PUT", "/leases/moe-operator", 409);
  EXPECT_FALSE(b->TryAcquireOrRenew());
  EXPECT_EQ(Holder(), "a");
}

TEST_F(LeaderElectionTest, StartStopReleasesForAFastHandover) {
  common::SystemClock& real = common::SystemClock::Get();
  std::atomic<int> started{0}, stopped{0};
  auto make = [&](const std::string& id) {
    return std::make_unique<LeaderElector>(
        LeaderElectionOptions{.ns = "moe",
                              .identity = id,
                              .lease_duration = absl::Seconds(3),
                              .renew_deadline = absl::Seconds(2),
                              .retry_period = absl::Milliseconds(100)},
        *client_, real, registry_, [&] { ++started; }, [&] { ++stopped; });
  };
  auto a = make("a");
  a->Start();
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (!a->leading() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(a->leading());
  auto b = make("b");
  b->Start();
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_FALSE(b->leading());
  a->Stop();  // releases the Lease
  EXPECT_FALSE(a->leading());
  const absl::Time t0 = absl::Now();
  while (!b->leading() && absl::Now() < t0 + absl::Seconds(5))
    absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(b->leading());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));  // well before the 3 s lease would expire
  b->Stop();
  EXPECT_EQ(started.load(), 2);
  EXPECT_EQ(stopped.load(), 2);
}

TEST(LeaderElectionOptionsTest, DeadlinesMustNest) {
  LeaderElectionOptions o{.ns = "moe", .identity = "x"};
  EXPECT_TRUE(o.Validate().ok());
  o.renew_deadline = o.lease_duration;
  EXPECT_FALSE(o.Validate().ok());
}

}  // namespace
}  // namespace moe::op::kube
