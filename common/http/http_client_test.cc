#include "common/http/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace moe::common::http {
namespace {

// A loopback server for one connection: for each request it reads (head and Content-Length
// body), `reply` returns the bytes to send back, in pieces sent one by one; an empty list closes.
class ScriptedServer {
 public:
  using Reply = std::function<std::vector<std::string>(const std::string& request)>;
  explicit ScriptedServer(Reply reply) : reply_(std::move(reply)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listen_fd_, 1);
    socklen_t len = sizeof(addr);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  void Serve() {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    std::string in;
    char buf[4096];
    for (;;) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) return Close(fd);
        in.append(buf, n);
      }
      size_t length = 0;
      if (size_t at = in.find("Content-Length: "); at != std::string::npos && at < end) {
        length = std::stoul(in.substr(at + 16));
      }
      while (in.size() < end + 4 + length) {
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) return Close(fd);
        in.append(buf, n);
      }
      const std::string request = in.substr(0, end + 4 + length);
      in.erase(0, request.size());
      const std::vector<std::string> pieces = reply_(request);
      if (pieces.empty()) return Close(fd);
      for (const std::string& p : pieces) ::send(fd, p.data(), p.size(), MSG_NOSIGNAL);
    }
  }
  static void Close(int fd) { ::close(fd); }

  Reply reply_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(FormatRequestTest, PostHasAJsonBodyAndGetHasNone) {
  EXPECT_EQ(FormatRequest("POST", "/v1/completions", "{}", "Bearer k"),
            "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer k\r\n"
            "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}");
  EXPECT_EQ(FormatRequest("GET", "/readyz", "", "", "127.0.0.2"),
            "GET /readyz HTTP/1.1\r\nHost: 127.0.0.2\r\n\r\n");
}

TEST(HttpClientTest, KeepAliveRequestsOnOneConnection) {
  ScriptedServer server([](const std::string& req) -> std::vector<std::string> {
    if (req.rfind("GET /a", 0) == 0) {
      return {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Thing: 1\r\n\r\nhel", "lo"};
    }
    return {"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n", "3\r\nabc\r\n",
            "0\r\n\r\n"};
  });
  HttpClient client(server.port());
  ASSERT_TRUE(client.connected());
  auto a = client.Request("GET", "/a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, 200);
  EXPECT_EQ(a->body, "hello");
  EXPECT_EQ(a->headers["x-thing"], "1");
  auto b = client.Request("POST", "/b", R"({"x":1})");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->status, 201);
  EXPECT_EQ(b->body, "abc");
  client.Close();
}

TEST(HttpClientTest, ReadsAStreamChunkByChunk) {
  ScriptedServer server([](const std::string&) -> std::vector<std::string> {
    return {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: 1", "\r\n",
            "7\r\ndata: 2\r\n0\r\n\r\n"};
  });
  HttpClient client(server.port());
  ASSERT_TRUE(client.Send("POST", "/stream", "{}"));
  auto head = client.ReadHeaders();
  ASSERT_TRUE(head);
  EXPECT_EQ(head->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(client.ReadChunk(), "data: 1");
  EXPECT_EQ(client.ReadChunk(), "data: 2");
  EXPECT_EQ(client.ReadChunk(), "");
}

TEST(HttpClientTest, ClosedOrSilentServersGiveNoResponse) {
  {
    ScriptedServer closes([](const std::string&) { return std::vector<std::string>{}; });
    EXPECT_FALSE(HttpCall(closes.port(), "GET", "/"));
  }
  {
    // Headers, then nothing: the read timeout (a deadline) ends it.
    ScriptedServer silent([](const std::string&) {
      return std::vector<std::string>{"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"};
    });
    HttpClient client("127.0.0.1", silent.port(), absl::Milliseconds(50));
    EXPECT_FALSE(client.Request("GET", "/"));
    client.Close();
  }
}

TEST(HttpClientTest, NothingListening) {
  int port = 0;
  {
    ScriptedServer gone([](const std::string&) { return std::vector<std::string>{}; });
    port = gone.port();
    HttpClient first(port);  // the one connection it accepts
  }
  HttpClient client(port);
  EXPECT_FALSE(client.connected());
  EXPECT_FALSE(client.Request("GET", "/"));
  EXPECT_FALSE(HttpCall("127.0.0.1", port, "GET", "/", absl::Seconds(1)));
  EXPECT_FALSE(HttpClient("not-an-address", port).connected());
}

}  // namespace
}  // namespace moe::common::http
