#include "common/http/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>
#include <utility>

namespace moe::common::http {

std::string FormatRequest(std::string_view method, std::string_view path, std::string_view body,
                          std::string_view auth, std::string_view host) {
  std::string req;
  req.append(method).append(" ").append(path).append(" HTTP/1.1\r\nHost: ").append(host);
  req.append("\r\n");
  if (!auth.empty()) req.append("Authorization: ").append(auth).append("\r\n");
  if (!body.empty() || method == "POST") {
    req.append("Content-Type: application/json\r\nContent-Length: ")
        .append(std::to_string(body.size()))
        .append("\r\n");
  }
  req.append("\r\n").append(body);
  return req;
}

HttpClient::HttpClient(std::string host, int port, absl::Duration timeout)
    : host_(std::move(host)) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr) != 1) return;
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) return;
  const timeval tv = absl::ToTimeval(timeout);
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) Close();
}

HttpClient::HttpClient(int port, absl::Duration timeout) : HttpClient("127.0.0.1", port, timeout) {}

HttpClient::HttpClient(HttpClient&& other) noexcept
    : host_(std::move(other.host_)),
      fd_(std::exchange(other.fd_, -1)),
      parser_(std::move(other.parser_)) {}

HttpClient::~HttpClient() { Close(); }

void HttpClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool HttpClient::SendRaw(std::string_view bytes) {
  size_t sent = 0;
  while (fd_ >= 0 && sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return fd_ >= 0;
}

bool HttpClient::Send(std::string_view method, std::string_view path, std::string_view body,
                      std::string_view auth) {
  return SendRaw(FormatRequest(method, path, body, auth, host_));
}

bool HttpClient::Fill() {
  if (fd_ < 0) return false;
  char buf[16384];
  ssize_t n;
  do {
    n = ::recv(fd_, buf, sizeof(buf), 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  parser_.Append(std::string_view(buf, static_cast<size_t>(n)));
  return true;
}

template <typename ParseFn>
bool HttpClient::Pull(ParseFn parse) {
  for (;;) {
    switch (parse()) {
      case ResponseParser::Result::kComplete:
        return true;
      case ResponseParser::Result::kMalformed:
        return false;
      case ResponseParser::Result::kIncomplete:
        if (!Fill()) return false;
    }
  }
}

std::optional<HttpResponse> HttpClient::ReadHeaders() {
  HttpResponse r;
  if (!Pull([&] { return parser_.ParseHead(r); })) return std::nullopt;
  return r;
}

std::optional<std::string> HttpClient::ReadChunk() {
  std::string chunk;
  if (!Pull([&] { return parser_.ParseChunk(chunk); })) return std::nullopt;
  return chunk;
}

std::optional<HttpResponse> HttpClient::Read() {
  std::optional<HttpResponse> r = ReadHeaders();
  if (!r) return std::nullopt;
  std::optional<std::string> body = ReadBody(*r);
  if (!body) return std::nullopt;
  r->body = *std::move(body);
  return r;
}

std::optional<std::string> HttpClient::ReadBody(const HttpResponse& head) {
  std::string body;
  auto te = head.headers.find("transfer-encoding");
  if (te != head.headers.end() && te->second == "chunked") {
    for (;;) {
      std::optional<std::string> chunk = ReadChunk();
      if (!chunk) return std::nullopt;
      if (chunk->empty()) break;
      body += *chunk;
    }
  } else if (auto it = head.headers.find("content-length"); it != head.headers.end()) {
    const size_t n = std::strtoul(it->second.c_str(), nullptr, 10);
    if (!Pull([&] { return parser_.ParseBytes(n, body); })) return std::nullopt;
  }
  return body;
}

std::optional<HttpResponse> HttpClient::Request(std::string_view method, std::string_view path,
                                                std::string_view body, std::string_view auth) {
  if (!Send(method, path, body, auth)) return std::nullopt;
  return Read();
}

std::optional<HttpResponse> HttpCall(int port, std::string_view method, std::string_view path,
                                     std::string_view body, std::string_view auth) {
  HttpClient client(port);
  return client.Request(method, path, body, auth);
}

std::optional<HttpResponse> HttpCall(const std::string& host, int port, std::string_view method,
                                     std::string_view path, absl::Duration timeout) {
  HttpClient client(host, port, timeout);
  return client.Request(method, path);
}

}  // namespace moe::common::http
