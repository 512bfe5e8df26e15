// Raw bytes as an HTTP/1.1 connection to the gateway: the real HttpServer (Beast parser, limits,
// keep-alive, SSE streaming) in front of the real Gateway core on a FakeBackend and the test
// tokenizer, started once on 127.0.0.1. Each input is written on a fresh connection, the write
// side is shut, and the answer read until the server closes (or 2 s pass: then the server hung on
// a request it should have answered or timed out, and the fuzzer traps).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/base/clock.h"
#include "common/metrics/registry.h"
#include "services/gateway/core/gateway.h"
#include "services/gateway/http_server.h"
#include "services/gateway/testing/fake_backend.h"
#include "services/gateway/testing/test_tokenizer.h"

namespace {

using namespace moe::gateway;

struct Server {
  std::unique_ptr<moe::tokenizer::Tokenizer> tokenizer = testing::MakeTestTokenizer();
  moe::common::metrics::Registry registry;
  testing::FakeBackend backend{testing::FakeBackendOptions{}};
  std::unique_ptr<Gateway> gateway;
  std::unique_ptr<HttpServer> http;
  int port = 0;

  Server() {
    GatewayOptions options;
    options.model_dir = "/unused";
    options.http.host = "127.0.0.1";
    options.http.port = 0;
    options.http.io_threads = 1;
    options.http.max_body_bytes = 64 << 10;
    options.http.idle_timeout = absl::Seconds(1);
    gateway =
        Gateway::Create(options, ModelInfo{"tiny", 512, 0},
                        GatewayDeps{*tokenizer, backend, moe::common::SystemClock::Get(), registry})
            .value();
    http = ServeGateway(options.http, *gateway).value();
    port = http->port();
  }
};

[[noreturn]] void Die(const char* what, int err) {
  std::fprintf(stderr, "gateway_http_fuzzer: %s: %s\n", what, std::strerror(err));
  std::abort();
}

Server& TheServer() {
  static Server* server = new Server();  // lives for the process: libFuzzer exits without teardown
  return *server;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Server& server = TheServer();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    // libFuzzer's timeout alarm (SIGALRM) can interrupt the connect: it goes on in the
    // background, so wait for it (a smoke pass in CI aborted here once).
    if (errno != EINTR && errno != EINPROGRESS) Die("connect", errno);
    pollfd w{fd, POLLOUT, 0};
    while (::poll(&w, 1, 2000) < 0 && errno == EINTR) {
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) Die("connect", err);
  }
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may close early (431 / 413 / bad request)
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  char buf[16384];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, 2000);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) __builtin_trap();  // the server neither answered nor closed
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  ::close(fd);
  return 0;
}
