#include "common/shm/handshake.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "common/testing/free_port.h"
#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::shm {
namespace {

using common::testing::StatusIs;

class HandshakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = common::testing::MakeTempDir("shm_hs");
    auto l = UnixListener::Listen(dir_ + "/w.sock");
    ASSERT_OK(l.status());
    listener_ = std::move(*l);
    ticket_ = RandomTicket();
  }

  // Serves one connection on a thread, admitting `ticket_` only.
  std::thread ServeOne(absl::StatusOr<std::unique_ptr<MappedRegion>>* out, PeerCredentials* peer) {
    return std::thread([this, out, peer] {
      auto conn = listener_->Accept(absl::Seconds(10));
      if (!conn.ok()) {
        *out = conn.status();
        return;
      }
      *out = ServeHandshake(
          *conn, 4096,
          [this](absl::string_view t, const PeerCredentials&) {
            return t == ticket_ ? absl::OkStatus() : absl::PermissionDeniedError("bad ticket");
          },
          absl::Seconds(5), peer);
    });
  }

  std::string dir_;
  std::unique_ptr<UnixListener> listener_;
  std::string ticket_;
};

TEST_F(HandshakeTest, BothSidesMapTheSameSealedRegion) {
  absl::StatusOr<std::unique_ptr<MappedRegion>> worker = absl::UnknownError("");
  PeerCredentials peer;
  std::thread t = ServeOne(&worker, &peer);
  auto router = ConnectHandshake(listener_->path(), ticket_, absl::Seconds(5));
  t.join();
  ASSERT_OK(router.status());
  ASSERT_OK(worker.status());
  EXPECT_EQ(peer.uid, getuid());
  EXPECT_EQ(peer.pid, getpid());
  const RegionView& w = (*worker)->view();
  const RegionView& r = (*router)->view();
  EXPECT_EQ(r.ring_bytes, 4096u);
  EXPECT_EQ(w.header->worker.state.load(), kPeerAttached);
  EXPECT_EQ(r.header->router.state.load(), kPeerAttached);
  EXPECT_EQ(r.header->router_token[0].load(), w.header->worker_token[0].load());
  // One memory: what one side writes, the other reads.
  r.request_data[100] = std::byte{42};
  EXPECT_EQ(w.request_data[100], std::byte{42});
  // Sealed: no side can shrink it under the other's mapping.
  EXPECT_NE(ftruncate((*router)->fd(), 4096), 0);
}

TEST_F(HandshakeTest, AWrongTicketGetsNoRegion) {
  absl::StatusOr<std::unique_ptr<MappedRegion>> worker = absl::UnknownError("");
  PeerCredentials peer;
  std::thread t = ServeOne(&worker, &peer);
  auto router = ConnectHandshake(listener_->path(), RandomTicket(), absl::Seconds(5));
  t.join();
  EXPECT_THAT(router.status(), StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(worker.status(), StatusIs(absl::StatusCode::kPermissionDenied));
}

TEST_F(HandshakeTest, ASilentClientTimesOutTheWorker) {
  absl::StatusOr<std::unique_ptr<MappedRegion>> worker = absl::UnknownError("");
  std::thread t([&] {
    auto conn = listener_->Accept(absl::Seconds(10));
    ASSERT_OK(conn.status());
    PeerCredentials peer;
    worker = ServeHandshake(
        *conn, 4096, [](absl::string_view, const PeerCredentials&) { return absl::OkStatus(); },
        absl::Milliseconds(50), &peer);
  });
  // Connect and say nothing.
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, listener_->path().c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  t.join();
  close(fd);
  EXPECT_THAT(worker.status(), StatusIs(absl::StatusCode::kDeadlineExceeded));
}

TEST_F(HandshakeTest, BadPathsAreRefused) {
  EXPECT_THAT(UnixListener::Listen(std::string(200, 'x')).status(),
              StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ConnectHandshake(dir_ + "/nobody.sock", ticket_, absl::Seconds(1)).status(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST(MappedRegionTest, MapRefusesAnUnsealedDescriptor) {
  const int fd = memfd_create("x", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, RegionBytes(4096)), 0);
  EXPECT_THAT(MappedRegion::Map(fd).status(), StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(HostBootIdTest, IsAUuid) { EXPECT_EQ(HostBootId().size(), 36u); }

}  // namespace
}  // namespace moe::shm
