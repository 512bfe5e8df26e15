#include "services/gateway/testing/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace moe::gateway::testing {

HttpTestClient::HttpTestClient(int port, int timeout_s) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  timeval tv{timeout_s, 0};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Close();
}

HttpTestClient::~HttpTestClient() { Close(); }

void HttpTestClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool HttpTestClient::SendRaw(const std::string& bytes) {
  size_t sent = 0;
  while (fd_ >= 0 && sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return fd_ >= 0;
}

bool HttpTestClient::Send(const std::string& method, const std::string& path,
                          const std::string& body, const std::string& auth) {
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  if (!auth.empty()) req += "Authorization: " + auth + "\r\n";
  if (!body.empty() || method == "POST") {
    req +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "\r\n" + body;
  return SendRaw(req);
}

bool HttpTestClient::Fill() {
  if (fd_ < 0) return false;
  char tmp[16384];
  const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
  if (n <= 0) return false;
  buf_.append(tmp, static_cast<size_t>(n));
  return true;
}

std::optional<std::string> HttpTestClient::ReadLine() {
  for (;;) {
    const size_t pos = buf_.find("\r\n");
    if (pos != std::string::npos) {
      std::string line = buf_.substr(0, pos);
      buf_.erase(0, pos + 2);
      return line;
    }
    if (!Fill()) return std::nullopt;
  }
}

std::optional<std::string> HttpTestClient::ReadExactly(size_t n) {
  while (buf_.size() < n) {
    if (!Fill()) return std::nullopt;
  }
  std::string out = buf_.substr(0, n);
  buf_.erase(0, n);
  return out;
}

std::optional<ClientResponse> HttpTestClient::ReadHeaders() {
  std::optional<std::string> status_line = ReadLine();
  if (!status_line || status_line->size() < 12) return std::nullopt;
  ClientResponse r;
  r.status = std::atoi(status_line->c_str() + 9);
  for (;;) {
    std::optional<std::string> line = ReadLine();
    if (!line) return std::nullopt;
    if (line->empty()) break;
    const size_t colon = line->find(':');
    if (colon == std::string::npos) continue;
    std::string name = line->substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    size_t v = colon + 1;
    while (v < line->size() && (*line)[v] == ' ') ++v;
    r.headers[name] = line->substr(v);
  }
  return r;
}

std::optional<std::string> HttpTestClient::ReadChunk() {
  std::optional<std::string> size_line = ReadLine();
  if (!size_line) return std::nullopt;
  const size_t size = std::strtoul(size_line->c_str(), nullptr, 16);
  std::optional<std::string> data = ReadExactly(size);
  if (!data || !ReadLine()) return std::nullopt;
  return data;
}

std::optional<ClientResponse> HttpTestClient::Read() {
  std::optional<ClientResponse> r = ReadHeaders();
  if (!r) return std::nullopt;
  if (r->headers["transfer-encoding"] == "chunked") {
    for (;;) {
      std::optional<std::string> chunk = ReadChunk();
      if (!chunk) return std::nullopt;
      if (chunk->empty()) break;
      r->body += *chunk;
    }
  } else if (r->headers.count("content-length")) {
    std::optional<std::string> body =
        ReadExactly(std::strtoul(r->headers["content-length"].c_str(), nullptr, 10));
    if (!body) return std::nullopt;
    r->body = std::move(*body);
  }
  return r;
}

std::optional<ClientResponse> HttpTestClient::Request(const std::string& method,
                                                      const std::string& path,
                                                      const std::string& body,
                                                      const std::string& auth) {
  if (!Send(method, path, body, auth)) return std::nullopt;
  return Read();
}

std::optional<ClientResponse> HttpCall(int port, const std::string& method, const std::string& path,
                                       const std::string& body, const std::string& auth) {
  HttpTestClient client(port);
  return client.Request(method, path, body, auth);
}

}  // namespace moe::gateway::testing
