#include "common/testing/fault_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace moe::common::testing {
namespace {

constexpr int kTickMs = 10;

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

void SetNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

void CloseReset(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
  close(fd);
}

}  // namespace

absl::StatusOr<std::unique_ptr<FaultProxy>> FaultProxy::Start(int upstream_port, int listen_port) {
  if (upstream_port <= 0 || upstream_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("upstream port ", upstream_port));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Loopback(listen_port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 128) != 0) {
    const std::string error = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("listen on 127.0.0.1:", listen_port, ": ", error));
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  SetNonBlocking(fd);
  std::unique_ptr<FaultProxy> proxy(new FaultProxy(fd, ntohs(addr.sin_port), upstream_port));
  proxy->acceptor_ = std::thread([p = proxy.get()] { p->AcceptLoop(); });
  return proxy;
}

FaultProxy::FaultProxy(int listen_fd, int port, int upstream_port)
    : listen_fd_(listen_fd), port_(port), upstream_port_(upstream_port) {}

FaultProxy::~FaultProxy() {
  stop_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    threads.swap(connections_);
  }
  for (std::thread& t : threads) t.join();
  close(listen_fd_);
}

std::string FaultProxy::address() const { return absl::StrCat("127.0.0.1:", port_); }

void FaultProxy::Set(Fault fault) {
  absl::MutexLock lock(&mu_);
  fault_ = fault;
  ++generation_;
}

FaultProxy::Fault FaultProxy::fault() const {
  absl::MutexLock lock(&mu_);
  return fault_;
}

std::pair<FaultProxy::Fault, int64_t> FaultProxy::Current() const {
  absl::MutexLock lock(&mu_);
  return {fault_, generation_};
}

void FaultProxy::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, kTickMs) <= 0) continue;
    const int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    accepted_.fetch_add(1);
    absl::MutexLock lock(&mu_);
    connections_.emplace_back([this, client] { Serve(client); });
  }
}

void FaultProxy::Serve(int client) {
  const int upstream = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = Loopback(upstream_port_);
  if (upstream < 0 || connect(upstream, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    // The upstream is down: the client sees its connection refused as a reset.
    if (upstream >= 0) close(upstream);
    CloseReset(client);
    return;
  }
  const int one = 1;
  setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(upstream, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  SetNonBlocking(client);
  SetNonBlocking(upstream);
  const int fds[2] = {client, upstream};
  bool open[2] = {true, true};  // fds[i] still has bytes to read
  int64_t generation = -1, since = 0;
  std::string buf(64 << 10, '\0');

  // Writes all of `data` to `fd`; false when the peer is gone or the proxy stops.
  auto write_all = [&](int fd, const char* data, size_t n) {
    while (n > 0) {
      const ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
      if (w > 0) {
        data += w;
        n -= static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      if (stop_.load()) return false;
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, kTickMs);
    }
    return true;
  };
  bool reset = false;
  while (!stop_.load() && (open[0] || open[1])) {
    const auto [fault, gen] = Current();
    if (gen != generation) {
      generation = gen;
      since = 0;
    }
    const bool cutting = fault.mode == Mode::kDrop || fault.mode == Mode::kReset;
    if (cutting && since >= fault.after_bytes) {
      cut_.fetch_add(1);
      reset = fault.mode == Mode::kReset;
      break;
    }
    if (fault.mode == Mode::kBlackHole) {
      poll(nullptr, 0, kTickMs);
      continue;
    }
    pollfd p[2] = {{open[0] ? fds[0] : -1, POLLIN, 0}, {open[1] ? fds[1] : -1, POLLIN, 0}};
    if (poll(p, 2, kTickMs) <= 0) continue;
    // Bytes that arrived after a Set belong to the new fault: if it changed while we polled,
    // start over with it (the bytes wait in the socket), else they would be relayed and counted
    // under the old one and a cut after N bytes would come late.
    if (Current().second != generation) continue;
    bool failed = false;
    for (int i = 0; i < 2 && !failed; ++i) {
      if (!open[i] || (p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      size_t want = buf.size();
      if (cutting) want = std::min<size_t>(want, static_cast<size_t>(fault.after_bytes - since));
      const ssize_t r = recv(fds[i], buf.data(), want, 0);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (r < 0) {  // reset by the peer: pass it on
        failed = true;
        reset = true;
        break;
      }
      if (r == 0) {  // half-close: pass it on
        open[i] = false;
        shutdown(fds[1 - i], SHUT_WR);
        continue;
      }
      if (fault.mode == Mode::kDelay)
        poll(nullptr, 0, static_cast<int>(absl::ToInt64Milliseconds(fault.delay)));
      if (!write_all(fds[1 - i], buf.data(), static_cast<size_t>(r))) {
        failed = true;
        reset = true;
        break;
      }
      since += r;
    }
    if (failed) break;
  }
  if (reset) {
    CloseReset(client);
    CloseReset(upstream);
  } else {
    close(client);
    close(upstream);
  }
}

}  // namespace moe::common::testing
