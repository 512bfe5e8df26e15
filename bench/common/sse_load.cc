#include "bench/common/sse_load.h"

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
#include <cmath>
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
  enum { kPending, kHeaders, kBody, kDone } state = kPending;
  std::string sse;  // de-chunked text not yet split into events
  bool open_counted = false;
  bool finished = false;  // saw a finish_reason
  Clock::time_point sent;
};

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void OnEvent(const std::string& data, Conn& c, StreamStats& s, double now_s) {
  if (data == "[DONE]") {
    s.done = true;
    return;
  }
  nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (j.contains("error")) {
    s.error = true;
    s.error_text = data;
    return;
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const nlohmann::json& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer()) {
      s.usage_prompt_tokens = u["prompt_tokens"].get<int64_t>();
    }
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer()) {
      s.usage_completion_tokens = u["completion_tokens"].get<int64_t>();
    }
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const nlohmann::json& ch = j["choices"][0];
  if (ch.contains("finish_reason") && ch["finish_reason"].is_string()) c.finished = true;
  size_t tokens = 0;
  const bool text =
      (ch.contains("text") && ch["text"].is_string() && !ch["text"].get<std::string>().empty()) ||
      (ch.contains("delta") && ch["delta"].is_object() &&
       !ch["delta"].value("content", "").empty());
  if (ch.contains("logprobs") && ch["logprobs"].is_object() && ch["logprobs"].contains("tokens")) {
    tokens = ch["logprobs"]["tokens"].size();
  } else if (text) {
    tokens = 1;
  }
  if (text || tokens > 0) s.chunk_s.push_back(now_s);
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
        if (c.finished && !s.error) s.done = true;
        return false;
      }
      c.sse += chunk;
      size_t pos;
      while ((pos = c.sse.find("\n\n")) != std::string::npos) {
        std::string event = c.sse.substr(0, pos);
        c.sse.erase(0, pos + 2);
        if (event.rfind("data: ", 0) == 0) OnEvent(event.substr(6), c, s, now_s);
      }
    } else {
      return false;
    }
  }
}

}  // namespace

LoadResult RunStreams(int port, const std::string& path, const std::vector<StreamRequest>& requests,
                      const LoadOptions& options) {
  LoadResult result;
  const size_t n = requests.size();
  result.streams.resize(n);
  std::vector<Conn> conns(n);
  std::vector<double> ended_at(n, -1);  // seconds after start; -1 while not ended
  const Clock::time_point start = Clock::now();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  size_t unsent = n, first_unsent = 0;
  int live = 0, open = 0;
  auto end = [&](size_t i) {
    Conn& c = conns[i];
    if (c.open_counted) --open;
    if (c.fd >= 0) {
      ::close(c.fd);
      --live;
    }
    c.fd = -1;
    c.state = Conn::kDone;
    ended_at[i] = Since(start);
  };
  for (size_t i = 0; i < n; ++i) {
    if (requests[i].after >= static_cast<int32_t>(i)) {
      result.streams[i].error = true;
      result.streams[i].error_text = "bad schedule: 'after' must name an earlier request";
      conns[i].state = Conn::kDone;
      ended_at[i] = 0;
      --unsent;
    }
  }
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  while ((live > 0 || unsent > 0) && Since(start) < options.timeout_s) {
    // Send what the schedule allows, in index order.
    double now = Since(start), next_due = options.timeout_s;
    for (size_t i = first_unsent; i < n; ++i) {
      Conn& c = conns[i];
      if (c.state != Conn::kPending) {
        if (i == first_unsent) ++first_unsent;
        continue;
      }
      if (options.max_concurrency > 0 && live >= options.max_concurrency) break;
      const StreamRequest& r = requests[i];
      double due = r.start_s;
      if (r.after >= 0) {
        if (ended_at[r.after] < 0) continue;
        due = std::max(due, ended_at[r.after] + r.after_delay_s);
      }
      if (due > now) {
        next_due = std::min(next_due, due);
        continue;
      }
      StreamStats& s = result.streams[i];
      --unsent;
      c.state = Conn::kHeaders;
      c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      if (c.fd < 0) {
        s.error = true;
        s.error_text = "socket() failed (file descriptor limit?)";
        c.state = Conn::kDone;
        ended_at[i] = now;
        continue;
      }
      ++live;
      int one = 1;
      ::setsockopt(c.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ::connect(c.fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
      c.out = common::http::FormatRequest("POST", path, r.body);
      c.sent = Clock::now();
      s.sent_s = Since(start);
    }
    fds.clear();
    index.clear();
    for (size_t i = 0; i < n; ++i) {
      if (conns[i].fd < 0) continue;
      fds.push_back({conns[i].fd, static_cast<short>(conns[i].out.empty() ? POLLIN : POLLOUT), 0});
      index.push_back(i);
    }
    const double wait_s = std::clamp(next_due - Since(start), 0.0, 0.1);
    const int wait_ms = unsent > 0 ? static_cast<int>(std::ceil(wait_s * 1e3)) : 100;
    if (fds.empty()) {
      if (unsent > 0) ::poll(nullptr, 0, std::max(1, wait_ms));
      continue;
    }
    if (::poll(fds.data(), fds.size(), wait_ms) <= 0) continue;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      const size_t i = index[k];
      Conn& c = conns[i];
      StreamStats& s = result.streams[i];
      bool keep = true;
      if (!c.out.empty()) {
        const ssize_t w = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL);
        if (w > 0) {
          c.out.erase(0, static_cast<size_t>(w));
        } else if (errno != EAGAIN && errno != EINPROGRESS) {
          keep = false;
          s.error = true;
          s.error_text = "send failed";
        }
      } else {
        char buf[65536];
        const ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
        if (r > 0) {
          c.in.Append(std::string_view(buf, static_cast<size_t>(r)));
          keep = Parse(c, s, &open);
          result.peak_open = std::max(result.peak_open, open);
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
          keep = false;
          if (c.state != Conn::kDone) {
            s.error = true;
            s.error_text = "connection closed early";
          }
        }
      }
      if (!keep) end(i);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    StreamStats& s = result.streams[i];
    if (conns[i].fd >= 0 || conns[i].state == Conn::kPending) {
      if (conns[i].fd >= 0) ::close(conns[i].fd);
      s.error = true;
      s.error_text = "timeout";
    }
    if (!s.done) s.error = true;
  }
  result.wall_s = Since(start);
  return result;
}

LoadResult RunStreams(int port, const std::string& path, const std::vector<std::string>& bodies,
                      double timeout_s) {
  std::vector<StreamRequest> requests;
  requests.reserve(bodies.size());
  for (const std::string& b : bodies) requests.push_back({.body = b});
  return RunStreams(port, path, requests, {.max_concurrency = 0, .timeout_s = timeout_s});
}

}  // namespace moe::bench
