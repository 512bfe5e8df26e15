// The shared-memory data plane end to end in one process: the router's ShmExpertChannel against
// the worker's ShmServer (with a fake compute handler), over a real socket handshake and memfd.
#include "services/router/shm_expert_channel.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "common/shm/handshake.h"
#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"
#include "services/expert-worker/core/shm_server.h"

namespace moe::router {
namespace {

using common::testing::StatusIs;
using expert_worker::ShmServer;
using expert_worker::ShmServerOptions;

constexpr int64_t kHidden = 16;

// out = 2 * in + expert_id; optionally fails one expert or holds a call until released.
class FakeHandler final : public expert_worker::ExpertCallHandler {
 public:
  int64_t hidden() const override { return kHidden; }
  absl::Status Run(const engine::ExpertCall& call, absl::Duration* compute) override {
    calls_.fetch_add(1);
    if (hold_next_.exchange(false)) release_.WaitForNotification();
    for (const engine::ExpertBatch& b : call.batches) {
      if (b.expert_id == fail_expert_) {
        return absl::FailedPreconditionError("expert not resident here");
      }
      for (int64_t i = 0; i < b.num_tokens * kHidden; ++i) {
        b.output[i] = 2 * b.input[i] + static_cast<float>(b.expert_id);
      }
    }
    *compute = absl::Microseconds(7);
    return absl::OkStatus();
  }
  std::atomic<int> calls_{0};
  std::atomic<bool> hold_next_{false};
  absl::Notification release_;
  int fail_expert_ = -1;
};

// A layer call: `rows[e]` rows for expert e (0 = none), inputs filled, outputs zeroed.
struct TestCall {
  TestCall(std::vector<int64_t> rows, float seed) {
    call.hidden = kHidden;
    call.layer_idx = 1;
    int64_t total = 0;
    for (int64_t n : rows) total += n;
    in.resize(static_cast<size_t>(total * kHidden));
    out.assign(in.size(), 0.0f);
    for (size_t i = 0; i < in.size(); ++i) in[i] = seed + 0.5f * static_cast<float>(i);
    int64_t at = 0;
    for (size_t e = 0; e < rows.size(); ++e) {
      if (rows[e] == 0) continue;
      call.batches.push_back(
          {static_cast<int32_t>(e), rows[e], in.data() + at * kHidden, out.data() + at * kHidden});
      idx.push_back(call.batches.size() - 1);
      at += rows[e];
    }
  }
  bool Answered() const {
    for (const engine::ExpertBatch& b : call.batches) {
      for (int64_t i = 0; i < b.num_tokens * kHidden; ++i) {
        if (b.output[i] != 2 * b.input[i] + static_cast<float>(b.expert_id)) return false;
      }
    }
    return true;
  }
  engine::ExpertCall call;
  std::vector<float> in, out;
  std::vector<size_t> idx;
};

class ShmExpertChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options_.dir = common::testing::MakeTempDir("shm_ch");
    options_.ring_bytes = 64 << 10;
    options_.peer_timeout = absl::Milliseconds(200);
    options_.heartbeat_interval = absl::Milliseconds(5);
    StartServer();
    channel_options_.peer_timeout = absl::Milliseconds(200);
  }
  void StartServer() {
    auto s = ShmServer::Start(options_, handler_, registry_, common::SystemClock::Get());
    ASSERT_OK(s.status());
    server_ = std::move(*s);
  }
  std::unique_ptr<ShmExpertChannel> Connect() {
    auto offer = server_->IssueTicket();
    EXPECT_OK(offer.status());
    auto c = ShmExpertChannel::Connect(offer->socket_path, offer->ticket, channel_options_,
                                       heartbeat_, common::SystemClock::Get());
    EXPECT_OK(c.status());
    return c.ok() ? std::move(*c) : nullptr;
  }
  // Polls `done` for up to 10 s (the server's threads move on their own time).
  static bool Eventually(const std::function<bool()>& done) {
    const absl::Time until = absl::Now() + absl::Seconds(10);
    while (!done()) {
      if (absl::Now() > until) return false;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }
  absl::Time Later() { return absl::Now() + absl::Seconds(10); }

  FakeHandler handler_;
  common::metrics::Registry registry_;
  ShmServerOptions options_;
  ShmChannelOptions channel_options_;
  shm::Heartbeat heartbeat_{5'000'000};
  std::unique_ptr<ShmServer> server_;
};

TEST_F(ShmExpertChannelTest, AnswersLandInTheCallersBuffersWhateverTheAwaitOrder) {
  auto ch = Connect();
  ASSERT_NE(ch, nullptr);
  EXPECT_TRUE(Eventually([&] { return server_->regions() == 1; }));
  TestCall a({3, 0, 5}, 1.0f), b({0, 7}, -2.0f), c({1, 1, 1, 1}, 0.25f);
  ASSERT_TRUE(ch->TrySubmit(1, a.call, a.idx, 0, Later()));
  ASSERT_TRUE(ch->TrySubmit(2, b.call, b.idx, 0, Later()));
  absl::Duration compute;
  ASSERT_OK(ch->Await(2, Later(), &compute));  // reads a's answer on the way
  EXPECT_TRUE(b.Answered());
  EXPECT_TRUE(a.Answered());
  EXPECT_EQ(compute, absl::Microseconds(7));
  ASSERT_OK(ch->Await(1, Later(), &compute));
  // Many more, to wrap the rings.
  for (int i = 0; i < 200; ++i) {
    TestCall d({static_cast<int64_t>(1 + i % 13), 0, static_cast<int64_t>(i % 5)}, 0.1f * i);
    ASSERT_TRUE(ch->TrySubmit(10 + i, d.call, d.idx, 0, Later()));
    ASSERT_OK(ch->Await(10 + i, Later(), nullptr));
    ASSERT_TRUE(d.Answered()) << i;
  }
  ASSERT_TRUE(ch->TrySubmit(3, c.call, c.idx, 0, Later()));
  ASSERT_OK(ch->Await(3, Later(), nullptr));
  EXPECT_TRUE(c.Answered());
  EXPECT_THAT(ch->Await(3, Later(), nullptr), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(registry_.Value("moe_expert_worker_shm_calls_total").value(), 203);
}

TEST_F(ShmExpertChannelTest, TheWorkersErrorsKeepTheirCodes) {
  handler_.fail_expert_ = 2;
  auto ch = Connect();
  TestCall a({1, 0, 1}, 1.0f);
  ASSERT_TRUE(ch->TrySubmit(1, a.call, a.idx, 0, Later()));
  EXPECT_THAT(ch->Await(1, Later(), nullptr),
              StatusIs(absl::StatusCode::kFailedPrecondition, "expert not resident here"));
  EXPECT_FALSE(ch->broken());
}

TEST_F(ShmExpertChannelTest, ACallTooLargeForHalfARingIsNotSent) {
  auto ch = Connect();
  TestCall big({600}, 0.0f);  // 600 x 16 x 4 = 38 KiB > 32 KiB
  EXPECT_FALSE(ch->TrySubmit(1, big.call, big.idx, 0, Later()));
  EXPECT_EQ(handler_.calls_.load(), 0);
  TestCall ok({100}, 0.0f);
  ASSERT_TRUE(ch->TrySubmit(2, ok.call, ok.idx, 0, Later()));
  ASSERT_OK(ch->Await(2, Later(), nullptr));
}

TEST_F(ShmExpertChannelTest, ACallPastItsDeadlineIsAbandonedAndItsLateAnswerDropped) {
  auto ch = Connect();
  TestCall slow({2}, 1.0f), next({3}, 2.0f);
  handler_.hold_next_ = true;
  ASSERT_TRUE(ch->TrySubmit(1, slow.call, slow.idx, 0, Later()));
  EXPECT_THAT(ch->Await(1, absl::Now() + absl::Milliseconds(30), nullptr),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  handler_.release_.Notify();
  ASSERT_TRUE(ch->TrySubmit(2, next.call, next.idx, 0, Later()));
  ASSERT_OK(ch->Await(2, Later(), nullptr));
  EXPECT_TRUE(next.Answered());
  EXPECT_FALSE(ch->broken());
}

TEST_F(ShmExpertChannelTest, AWorkerThatShutsDownFailsTheCallAtOnce) {
  auto ch = Connect();
  TestCall a({2}, 1.0f);
  handler_.hold_next_ = true;
  ASSERT_TRUE(ch->TrySubmit(1, a.call, a.idx, 0, Later()));
  std::thread stop([&] {
    ASSERT_TRUE(Eventually([&] { return handler_.calls_.load() == 1; }));
    handler_.release_.Notify();
    server_.reset();  // the region is closed after the held call is answered
  });
  ASSERT_OK(ch->Await(1, Later(), nullptr));
  stop.join();
  TestCall b({2}, 1.0f);
  const absl::Time start = absl::Now();
  // Either refused at once (already seen closed) or failed by Await.
  if (ch->TrySubmit(2, b.call, b.idx, 0, Later())) {
    EXPECT_THAT(ch->Await(2, Later(), nullptr), StatusIs(absl::StatusCode::kUnavailable));
  }
  EXPECT_TRUE(ch->broken());
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

// A worker killed with SIGKILL leaves a region nobody answers or beats: the router's side of a
// handshake served by hand, which never starts serving.
TEST_F(ShmExpertChannelTest, AWorkerThatStopsBeatingIsNoticedWithinThePeerTimeout) {
  auto listener = shm::UnixListener::Listen(options_.dir + "/dead.sock");
  ASSERT_OK(listener.status());
  const std::string ticket = shm::RandomTicket();
  std::unique_ptr<shm::MappedRegion> worker_side;
  std::thread serve([&] {
    auto conn = (*listener)->Accept(absl::Seconds(10));
    ASSERT_OK(conn.status());
    shm::PeerCredentials peer;
    auto r = shm::ServeHandshake(
        *conn, 64 << 10,
        [](absl::string_view, const shm::PeerCredentials&) { return absl::OkStatus(); },
        absl::Seconds(5), &peer);
    ASSERT_OK(r.status());
    worker_side = std::move(*r);
  });
  auto ch = ShmExpertChannel::Connect((*listener)->path(), ticket, channel_options_, heartbeat_,
                                      common::SystemClock::Get());
  serve.join();
  ASSERT_OK(ch.status());
  TestCall a({2}, 1.0f);
  ASSERT_TRUE((*ch)->TrySubmit(1, a.call, a.idx, 0, Later()));
  const absl::Time start = absl::Now();
  EXPECT_THAT((*ch)->Await(1, start + absl::Seconds(30), nullptr),
              StatusIs(absl::StatusCode::kUnavailable, ::testing::HasSubstr("stopped beating")));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // peer_timeout 200 ms, not the deadline
  EXPECT_TRUE((*ch)->broken());
  EXPECT_FALSE((*ch)->TrySubmit(2, a.call, a.idx, 0, Later()));
}

TEST_F(ShmExpertChannelTest, TheWorkerDropsTheRegionOfARouterThatLeavesOrDies) {
  {
    auto ch = Connect();
    EXPECT_TRUE(Eventually([&] { return server_->regions() == 1; }));
  }  // closed in order
  ASSERT_TRUE(Eventually([&] { return server_->regions() == 0; }));
  EXPECT_EQ(registry_.Value("moe_expert_worker_shm_peers_lost_total").value(), 0);
  // A router that maps the region and never beats (killed right after the handshake).
  auto offer = server_->IssueTicket();
  ASSERT_OK(offer.status());
  auto region = shm::ConnectHandshake(offer->socket_path, offer->ticket, absl::Seconds(5));
  ASSERT_OK(region.status());
  ASSERT_TRUE(Eventually([&] { return server_->regions() == 1; }));
  ASSERT_TRUE(Eventually([&] { return server_->regions() == 0; }));
  EXPECT_EQ(registry_.Value("moe_expert_worker_shm_peers_lost_total").value(), 1);
  EXPECT_EQ((*region)->view().header->worker.state.load(), shm::kPeerClosed);
}

TEST_F(ShmExpertChannelTest, OnlyTicketsTheControlPlaneIssuedGetARegion) {
  auto forged =
      shm::ConnectHandshake(server_->socket_path(), shm::RandomTicket(), absl::Seconds(5));
  EXPECT_THAT(forged.status(), StatusIs(absl::StatusCode::kPermissionDenied));
  auto offer = server_->IssueTicket();
  ASSERT_OK(offer.status());
  ASSERT_OK(shm::ConnectHandshake(offer->socket_path, offer->ticket, absl::Seconds(5)).status());
  // Single use.
  EXPECT_THAT(shm::ConnectHandshake(offer->socket_path, offer->ticket, absl::Seconds(5)).status(),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_TRUE(Eventually([&] {
    return registry_.Value("moe_expert_worker_shm_handshakes_total", {{"result", "refused"}})
               .value_or(0) == 2;
  }));
}

TEST_F(ShmExpertChannelTest, AStartingWorkerRemovesTheSocketsOfDeadWorkers) {
  // A pid that was just freed (a child that exited and was reaped) and ours.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string stale = absl::StrCat(options_.dir, "/moe-ew-", child, "-0badc0de.sock");
  const std::string live = absl::StrCat(options_.dir, "/moe-ew-", getpid(), "-0badc0de.sock");
  std::ofstream(stale) << "";
  std::ofstream(live) << "";
  server_.reset();
  StartServer();
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(server_->socket_path()));
}

TEST_F(ShmExpertChannelTest, TicketsAreBoundedByMaxRegions) {
  server_.reset();
  options_.max_regions = 2;
  StartServer();
  ASSERT_OK(server_->IssueTicket().status());
  ASSERT_OK(server_->IssueTicket().status());
  EXPECT_THAT(server_->IssueTicket().status(), StatusIs(absl::StatusCode::kResourceExhausted));
}

}  // namespace
}  // namespace moe::router
