#include "common/testing/fault_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <thread>

#include "common/testing/status_matchers.h"
#include "gtest/gtest.h"

namespace moe::common::testing {
namespace {

using Mode = FaultProxy::Mode;

// An echo server on 127.0.0.1 (one thread per connection), for the proxy to forward to.
class EchoServer {
 public:
  EchoServer() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        std::thread([c] {
          char buf[4096];
          for (;;) {
            const ssize_t r = recv(c, buf, sizeof(buf), 0);
            if (r <= 0) break;
            if (send(c, buf, r, MSG_NOSIGNAL) != r) break;
          }
          close(c);
        }).detach();
      }
    });
  }
  ~EchoServer() {
    shutdown(fd_, SHUT_RDWR);
    close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval tv{10, 0};  // a broken proxy fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

// Reads exactly `n` bytes (or fewer when the stream ends or fails).
std::string ReadN(int fd, size_t n) {
  std::string out;
  char buf[4096];
  while (out.size() < n) {
    const ssize_t r = recv(fd, buf, std::min(sizeof(buf), n - out.size()), 0);
    if (r <= 0) break;
    out.append(buf, r);
  }
  return out;
}

// recv of one byte: 1 (a byte), 0 (closed), or -errno.
int EndOfStream(int fd) {
  char c;
  const ssize_t r = recv(fd, &c, 1, 0);
  return r < 0 ? -errno : static_cast<int>(r);
}

TEST(FaultProxyTest, PassForwardsBothWays) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port());
  ASSERT_OK(proxy.status());
  const int fd = Connect((*proxy)->port());
  ASSERT_EQ(send(fd, "hello", 5, 0), 5);
  EXPECT_EQ(ReadN(fd, 5), "hello");
  EXPECT_EQ((*proxy)->accepted(), 1);
  close(fd);
}

TEST(FaultProxyTest, DelayStillDeliversEveryByte) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port());
  ASSERT_OK(proxy.status());
  (*proxy)->Set({.mode = Mode::kDelay, .delay = absl::Milliseconds(20)});
  const int fd = Connect((*proxy)->port());
  const std::string big(100000, 'x');
  std::thread writer([&] { EXPECT_EQ(send(fd, big.data(), big.size(), 0), ssize_t(big.size())); });
  EXPECT_EQ(ReadN(fd, big.size()), big);
  writer.join();
  close(fd);
}

TEST(FaultProxyTest, DropClosesAfterTheGivenBytes) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port());
  ASSERT_OK(proxy.status());
  const int fd = Connect((*proxy)->port());
  ASSERT_EQ(send(fd, "ab", 2, 0), 2);
  EXPECT_EQ(ReadN(fd, 2), "ab");
  // From now on: 5 bytes up and back (10 in all), then closed.
  (*proxy)->Set({.mode = Mode::kDrop, .after_bytes = 10});
  ASSERT_EQ(send(fd, "12345", 5, 0), 5);
  EXPECT_EQ(ReadN(fd, 5), "12345");
  EXPECT_EQ(EndOfStream(fd), 0);
  EXPECT_EQ((*proxy)->cut(), 1);
  close(fd);
}

TEST(FaultProxyTest, ResetMidStreamIsSeenAsConnectionReset) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port());
  ASSERT_OK(proxy.status());
  (*proxy)->Set({.mode = Mode::kReset, .after_bytes = 6});
  const int fd = Connect((*proxy)->port());
  ASSERT_EQ(send(fd, "abc", 3, 0), 3);
  // The echo may or may not be read before the reset lands; the end is a reset, never a FIN.
  std::string got;
  int end;
  while ((end = EndOfStream(fd)) == 1) got += '?';
  EXPECT_LE(got.size(), 3u);
  EXPECT_EQ(end, -ECONNRESET);
  close(fd);
}

TEST(FaultProxyTest, BlackHoleAcceptsAndHoldsUntilSwitchedBack) {
  EchoServer echo;
  auto proxy = FaultProxy::Start(echo.port());
  ASSERT_OK(proxy.status());
  (*proxy)->Set({.mode = Mode::kBlackHole});
  const int fd = Connect((*proxy)->port());  // accepted...
  ASSERT_EQ(send(fd, "ping", 4, 0), 4);
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 200), 0);  // ...and never answered
  (*proxy)->Set({});               // switched at run time: what was held flows
  EXPECT_EQ(ReadN(fd, 4), "ping");
  close(fd);
}

TEST(FaultProxyTest, UpstreamDownResetsTheClient) {
  int port;
  {
    EchoServer gone;
    port = gone.port();
  }
  auto proxy = FaultProxy::Start(port);
  ASSERT_OK(proxy.status());
  const int fd = Connect((*proxy)->port());
  const int end = EndOfStream(fd);
  EXPECT_TRUE(end == 0 || end == -ECONNRESET) << end;
  close(fd);
}

TEST(FaultProxyTest, BadUpstreamPortIsRefused) {
  EXPECT_FALSE(FaultProxy::Start(0).ok());
  EXPECT_FALSE(FaultProxy::Start(70000).ok());
}

}  // namespace
}  // namespace moe::common::testing
