#include "bench/gateway/sse_load.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string>
#include <string_view>

#include "common/http/http_client.h"
#include "common/http/response_parser.h"
#include "nlohmann/json.hpp"

namespace moe::bench {
namespace {

using Clock = std::chrono::steady_clock;
using common::http::ResponseParser;

struct Conn {
  int fd = -1;
  std::string out;  // request bytes not yet sent
  ResponseParser in;
  enum { kHeaders, kBody, kDone } state = kHeaders;
  std::string sse;  // de-chunked text not yet split into events
  bool open_counted = false;
  Clock::time_point sent;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void OnEvent(const std::string& data, StreamStats& s, double now_s) {
  if (data == "[DONE]") {
    s.done = true;
    return;
  }
  nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded()) return;
  if (j.contains("error")) {
    s.error = true;
    s.error_text = data;
    return;
  }
  if (!j.contains("choices") || j["choices"].empty()) return;
  const nlohmann::json& c = j["choices"][0];
  size_t tokens = 0;
  if (c.contains("logprobs") && c["logprobs"].is_object() && c["logprobs"].contains("tokens")) {
    tokens = c["logprobs"]["tokens"].size();
  } else if (!c.value("text", "").empty() ||
             (c.contains("delta") && !c["delta"].value("content", "").empty())) {
    tokens = 1;
  }
  for (size_t i = 0; i < tokens; ++i) s.token_s.push_back(now_s);
}

// Parses what arrived; returns false when the stream is over (or broken).
bool Parse(Conn& c, StreamStats& s, int* open) {
  const double now_s = Since(c.sent);
  for (;;) {
    if (c.state == Conn::kHeaders) {
      common::http::HttpResponse head;
      const ResponseParser::Result r = c.in.ParseHead(head);
      if (r == ResponseParser::Result::kIncomplete) return true;
      s.status = head.status;
      const bool chunked = head.headers["transfer-encoding"].find("chunked") != std::string::npos;
      if (r == ResponseParser::Result::kMalformed || s.status != 200 || !chunked) {
        s.error = true;
        s.error_text = "status " + std::to_string(s.status);
        return false;
      }
      c.open_counted = true;
      ++*open;
      c.state = Conn::kBody;
    } else if (c.state == Conn::kBody) {
      std::string chunk;
      const ResponseParser::Result r = c.in.ParseChunk(chunk);
      if (r == ResponseParser::Result::kIncomplete) return true;
      if (r == ResponseParser::Result::kMalformed) {
        s.error = true;
        s.error_text = "malformed chunk";
        return false;
      }
      if (chunk.empty()) {
        c.state = Conn::kDone;
        s.end_s = now_s;
        return false;
      }
      c.sse += chunk;
      size_t pos;
      while ((pos = c.sse.find("\n\n")) != std::string::npos) {
        std::string event = c.sse.substr(0, pos);
        c.sse.erase(0, pos + 2);
        if (event.rfind("data: ", 0) == 0) OnEvent(event.substr(6), s, now_s);
      }
    } else {
      return false;
    }
  }
}

}  // namespace

LoadResult RunStreams(int port, const std::string& path, const std::vector<std::string>& bodies,
                      double timeout_s) {
  LoadResult result;
  result.streams.resize(bodies.size());
  std::vector<Conn> conns(bodies.size());
  const Clock::time_point start = Clock::now();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int live = 0;
  for (size_t i = 0; i < bodies.size(); ++i) {
    Conn& c = conns[i];
    c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (c.fd < 0) {
      result.streams[i].error = true;
      result.streams[i].error_text = "socket() failed (file descriptor limit?)";
      continue;
    }
    int one = 1;
    ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    c.out = common::http::FormatRequest("POST", path, bodies[i]);
    c.sent = Clock::now();
    ++live;
  }
  int open = 0;
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  while (live > 0 && Since(start) < timeout_s) {
    fds.clear();
    index.clear();
    for (size_t i = 0; i < conns.size(); ++i) {
      if (conns[i].fd < 0) continue;
      fds.push_back({conns[i].fd, static_cast<short>(conns[i].out.empty() ? POLLIN : POLLOUT), 0});
      index.push_back(i);
    }
    if (::poll(fds.data(), fds.size(), 100) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Conn& c = conns[index[k]];
      StreamStats& s = result.streams[index[k]];
      bool keep = true;
      if (!c.out.empty()) {
        const ssize_t n = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (n > 0) {
          c.out.erase(0, static_cast<size_t>(n));
        } else if (errno != EAGAIN && errno != EINPROGRESS) {
          keep = false;
          s.error = true;
          s.error_text = "send failed";
        }
      } else {
        char buf[65536];
        const ssize_t n = ::recv(c.fd, buf, sizeof(buf), 0);
        if (n > 0) {
          c.in.Append(std::string_view(buf, static_cast<size_t>(n)));
          keep = Parse(c, s, &open);
          result.peak_open = std::max(result.peak_open, open);
        } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
          keep = false;
          if (c.state != Conn::kDone) {
            s.error = true;
            s.error_text = "connection closed early";
          }
        }
      }
      if (!keep) {
        if (c.open_counted) --open;
        ::close(c.fd);
        c.fd = -1;
        --live;
      }
    }
  }
  for (size_t i = 0; i < conns.size(); ++i) {
    if (conns[i].fd >= 0) {
      ::close(conns[i].fd);
      result.streams[i].error = true;
      result.streams[i].error_text = "timeout";
    }
    if (!result.streams[i].done) result.streams[i].error = true;
  }
  result.wall_s = Since(start);
  return result;
}

}  // namespace moe::bench
