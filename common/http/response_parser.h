// An incremental HTTP/1.1 response parser: append the bytes of one connection as they arrive,
// then take the next complete piece. Blocking clients (http_client.h) and event loops over many
// connections (bench/gateway/sse_load.cc) share it.
//
// Pieces are taken in protocol order by the caller: ParseHead once, then the body by what the
// head says: ParseChunk until the last (empty) chunk for `transfer-encoding: chunked`, or
// ParseBytes(content-length). Keep-alive: the next response's ParseHead follows.
//
// Each Parse* either consumes one whole piece (kComplete) or nothing (kIncomplete: append more
// bytes and call again; kMalformed: the connection is unusable).
//
// Thread-compatible.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>

namespace moe::common::http {

struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names, values without leading blanks
  std::string body;                            // de-chunked
};

class ResponseParser {
 public:
  enum class Result { kComplete, kIncomplete, kMalformed };

  void Append(std::string_view bytes);

  // The status line and headers into `head` (its body is left alone).
  Result ParseHead(HttpResponse& head);
  // The next chunk's data into `chunk`; "" is the last chunk (trailers are not supported).
  Result ParseChunk(std::string& chunk);
  // The next `n` bytes into `out`.
  Result ParseBytes(size_t n, std::string& out);

  // Bytes appended and not consumed yet.
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  // The line starting at pos_ (without CRLF) and the offset just past it; npos when incomplete.
  size_t LineEnd(size_t from) const;
  void Consume(size_t to);

  std::string buf_;
  size_t pos_ = 0;  // buf_[0, pos_) is consumed
};

}  // namespace moe::common::http
