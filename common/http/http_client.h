// A blocking HTTP/1.1 client over one TCP connection, for tools, tests and benchmarks: `moe up`'s
// readiness probe, the gateway's HTTP tests (raw bytes, streams read chunk by chunk, a
// connection dropped mid-stream) and the gateway benchmark. Deliberately independent of the
// server's HTTP library, and of cpp-httplib, which cannot send malformed requests or stop
// reading mid-stream.
//
//   HttpClient client(port);                         // 127.0.0.1
//   std::optional<HttpResponse> r = client.Request("GET", "/healthz");
//   if (r && r->status == 200) ...
//
// Every call returns nullopt (or false) when the connection fails, closes or a read waits longer
// than the timeout; the client is unusable afterwards.
//
// Thread-compatible: one connection, one thread at a time.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/time/time.h"
#include "common/http/response_parser.h"

namespace moe::common::http {

// The bytes of a request: `method path HTTP/1.1`, Host, Authorization when `auth` is set, and a
// JSON Content-Type with Content-Length when there is a body (or the method is POST).
std::string FormatRequest(std::string_view method, std::string_view path,
                          std::string_view body = "", std::string_view auth = "",
                          std::string_view host = "127.0.0.1");

class HttpClient {
 public:
  // Connects to `host`:`port` (an IPv4 address); `timeout` bounds each read.
  HttpClient(std::string host, int port, absl::Duration timeout = absl::Seconds(20));
  // Connects to 127.0.0.1:`port`.
  explicit HttpClient(int port, absl::Duration timeout = absl::Seconds(20));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;
  HttpClient(HttpClient&& other) noexcept;
  HttpClient& operator=(HttpClient&&) = delete;

  bool connected() const { return fd_ >= 0; }

  // Sends bytes as they are.
  bool SendRaw(std::string_view bytes);
  // Sends FormatRequest(method, path, body, auth, host).
  bool Send(std::string_view method, std::string_view path, std::string_view body = "",
            std::string_view auth = "");
  // Reads one whole response (body by Content-Length or chunked; none without either).
  std::optional<HttpResponse> Read();
  // Send, then Read.
  std::optional<HttpResponse> Request(std::string_view method, std::string_view path,
                                      std::string_view body = "", std::string_view auth = "");
  // Reads a response's status line and headers only (for streams: then ReadChunk).
  std::optional<HttpResponse> ReadHeaders();
  // Reads the body that follows `head` (from ReadHeaders): chunked, by Content-Length, or none.
  std::optional<std::string> ReadBody(const HttpResponse& head);
  // Reads the next chunk of a chunked body; "" at its end.
  std::optional<std::string> ReadChunk();
  // Drops the connection (mid-stream too).
  void Close();

 private:
  bool Fill();  // Receives more bytes into parser_; false on error, timeout or close.
  // Runs `parse` until it completes, receiving more bytes as needed; false when it cannot.
  template <typename ParseFn>
  bool Pull(ParseFn parse);

  std::string host_;
  int fd_ = -1;
  ResponseParser parser_;
};

// A one-shot request on a fresh connection to 127.0.0.1:`port` (or `host`:`port`).
std::optional<HttpResponse> HttpCall(int port, std::string_view method, std::string_view path,
                                     std::string_view body = "", std::string_view auth = "");
std::optional<HttpResponse> HttpCall(const std::string& host, int port, std::string_view method,
                                     std::string_view path, absl::Duration timeout);

}  // namespace moe::common::http
