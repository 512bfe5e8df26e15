// A blocking HTTP/1.1 client over a POSIX socket for the gateway's tests and benchmarks: sends
// raw requests, reads responses (Content-Length or chunked), and can read a stream chunk by chunk
// or drop the connection mid-stream. Deliberately independent of the server's HTTP library.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace moe::gateway::testing {

struct ClientResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

class HttpTestClient {
 public:
  // Connects to 127.0.0.1:port; receive timeout `timeout_s` per read.
  explicit HttpTestClient(int port, int timeout_s = 20);
  ~HttpTestClient();
  HttpTestClient(const HttpTestClient&) = delete;
  HttpTestClient& operator=(const HttpTestClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends bytes as they are.
  bool SendRaw(const std::string& bytes);
  // Sends a request with Content-Length (and Authorization when given).
  bool Send(const std::string& method, const std::string& path, const std::string& body = "",
            const std::string& auth = "");
  // Reads one whole response; nullopt on error/timeout/close.
  std::optional<ClientResponse> Read();
  // Sends and reads.
  std::optional<ClientResponse> Request(const std::string& method, const std::string& path,
                                        const std::string& body = "", const std::string& auth = "");
  // Reads a response's status line and headers only (for streams).
  std::optional<ClientResponse> ReadHeaders();
  // Reads the next chunk of a chunked body; "" at the end; nullopt on error.
  std::optional<std::string> ReadChunk();
  void Close();

 private:
  bool Fill();  // reads more bytes into buf_
  std::optional<std::string> ReadLine();
  std::optional<std::string> ReadExactly(size_t n);

  int fd_ = -1;
  std::string buf_;
};

// A one-shot request on a fresh connection.
std::optional<ClientResponse> HttpCall(int port, const std::string& method, const std::string& path,
                                       const std::string& body = "", const std::string& auth = "");

}  // namespace moe::gateway::testing
