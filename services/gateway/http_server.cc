#include "services/gateway/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <deque>
#include <functional>
#include <iterator>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/websocket.hpp"
#include "common/base/log.h"
#include "services/gateway/core/api_error.h"
#include "services/gateway/core/gateway.h"
#include "services/gateway/core/gateway_metrics.h"
#include "services/gateway/core/request_id.h"
#include "services/gateway/ws_session.h"

namespace moe::gateway {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using internal::WsSession;
using internal::WsSessionLimits;
using internal::WsSessionRegistry;
using internal::WsWriter;

class Server;

// One client connection. All members are used on the connection's strand only.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, Server* server);
  ~Connection();

  void Start() { DoRead(); }
  // Closes the socket and cancels a request in progress (from any thread).
  void PostClose();

  // Called (via post) by the writer of request `seq`.
  void OnSend(uint64_t seq, HttpResponse response);
  void OnStartStream(uint64_t seq, int status, HttpHeaders headers);
  void OnWrite(uint64_t seq, std::string data);
  void OnEnd(uint64_t seq);
  // Writer::WhenFlushed: `fn` now when nothing of response `seq` is left to write, else once it
  // is written or the connection closes.
  void OnWhenFlushed(uint64_t seq, std::function<void()> fn);
  // Writer::WhenWritable: `fn` now when response `seq` has at most stream_read_pause_bytes
  // unsent, else once the writes bring it there or the connection closes.
  void OnWhenWritable(uint64_t seq, std::function<void()> fn);

  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  enum class State { kReading, kHandling, kStreaming, kDone, kClosed };

  void DoRead();
  void OnHeader(beast::error_code ec);
  void OnRead(beast::error_code ec);
  // Hands the socket to a WebSocket session (or answers the upgrade with the rejection).
  void Upgrade(http::request<http::string_body> req, HttpRequest request);
  void WatchForDisconnect(uint64_t seq);
  // Queues bytes and starts writing them, or with `defer` a moment later (after the handlers
  // already posted to this connection), so what they queue goes out in the same send.
  void Enqueue(std::string bytes, bool defer = false);
  void RunFlushed();
  void RunWritable();
  // out_bytes_ += delta, and the server-wide moe_gateway_pending_write_bytes with it.
  void AddOutBytes(int64_t delta);
  void DoWrite();
  void OnWritten(beast::error_code ec);
  void FinishResponse();
  void ClientGone();
  void Close();
  void LingeringClose();
  void Drain();
  std::string Header(int status, const std::string& content_type, const HttpHeaders& extra,
                     std::optional<size_t> content_length, bool chunked);
  void SendError(const ApiError& error);

  beast::tcp_stream stream_;
  Server* const server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kReading;
  uint64_t seq_ = 0;
  bool keep_alive_ = true;
  CancelFn cancel_;
  std::deque<std::string> out_;
  int64_t out_bytes_ = 0;  // bytes in out_, bounded by max_pending_write_bytes
  bool writing_ = false;
  bool flush_posted_ = false;  // a deferred Enqueue's DoWrite is posted
  bool response_complete_ = false;
  std::function<void()> on_flushed_;  // WhenFlushed's callback, waiting for the bytes to leave
  // WhenWritable's callback (the backend's next read), waiting for out_bytes_ to fall to
  // stream_read_pause_bytes. Strand-confined like every member: the gRPC thread that asked
  // reaches it only through Writer's post.
  std::function<void()> on_writable_;
  std::string client_;
  bool handed_over_ = false;  // the socket belongs to a WebSocket session now
};

// Calls its function once: from Run(), or at the latest when destroyed.
class RunOnce {
 public:
  explicit RunOnce(std::function<void()> fn) : fn_(std::move(fn)) {}
  ~RunOnce() { Run(); }
  RunOnce(const RunOnce&) = delete;
  RunOnce& operator=(const RunOnce&) = delete;
  void Run() {
    if (!done_.exchange(true) && fn_) fn_();
  }

 private:
  std::function<void()> fn_;
  std::atomic<bool> done_{false};
};

class Writer final : public ResponseWriter {
 public:
  // Holds no executor: a writer can outlive the server's io_context (a handler thread still
  // holding it at shutdown), and destroying an any_io_executor after its context is UB (UBSan
  // saw it). Only a live connection, whose executor is alive with it, is posted to.
  Writer(std::weak_ptr<Connection> conn, uint64_t seq) : conn_(std::move(conn)), seq_(seq) {}
  void Send(HttpResponse response) override {
    Post([seq = seq_, r = std::move(response)](Connection& c) mutable {
      c.OnSend(seq, std::move(r));
    });
  }
  void StartStream(int status, HttpHeaders headers) override {
    Post([seq = seq_, status, h = std::move(headers)](Connection& c) mutable {
      c.OnStartStream(seq, status, std::move(h));
    });
  }
  void Write(std::string data) override {
    Post(
        [seq = seq_, d = std::move(data)](Connection& c) mutable { c.OnWrite(seq, std::move(d)); });
  }
  void End() override {
    Post([seq = seq_](Connection& c) { c.OnEnd(seq); });
  }
  void WhenFlushed(std::function<void()> fn) override {
    // Runs fn even if the posted handler is dropped unrun (the server stopped): no slot leaks.
    auto once = std::make_shared<RunOnce>(std::move(fn));
    Post([seq = seq_, once](Connection& c) { c.OnWhenFlushed(seq, [once] { once->Run(); }); });
  }
  void WhenWritable(std::function<void()> fn) override {
    // The same guarantee: a router stream paused here is always read on (and so can end).
    auto once = std::make_shared<RunOnce>(std::move(fn));
    Post([seq = seq_, once](Connection& c) { c.OnWhenWritable(seq, [once] { once->Run(); }); });
  }

 private:
  template <typename F>
  void Post(F f) {
    std::shared_ptr<Connection> conn = conn_.lock();
    if (!conn) return;
    net::any_io_executor ex = conn->executor();
    net::post(ex, [conn = std::move(conn), f = std::move(f)]() mutable { f(*conn); });
  }
  const std::weak_ptr<Connection> conn_;
  const uint64_t seq_;
};

class Server final : public HttpServer, public WsSessionRegistry {
 public:
  Server(const HttpOptions& options, Handler handler, UpgradeHandler upgrade,
         GatewayMetrics& metrics)
      : options_(options),
        handler_(std::move(handler)),
        upgrade_(std::move(upgrade)),
        metrics_(metrics),
        ioc_(options.io_threads),
        acceptor_(net::make_strand(ioc_)),
        work_(net::make_work_guard(ioc_)) {}
  ~Server() override { Stop(); }

  absl::Status Bind() {
    beast::error_code ec;
    const net::ip::address address = net::ip::make_address(options_.host, ec);
    if (ec)
      return absl::InvalidArgumentError(
          absl::StrCat("http.host: ", options_.host, ": ", ec.message()));
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          absl::StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    return absl::OkStatus();
  }

  void Run() {
    DoAccept();
    for (int i = 0; i < options_.io_threads; ++i) {
      threads_.emplace_back([this] { ioc_.run(); });
    }
  }

  int port() const override { return port_; }
  int64_t open_connections() const override { return open_.load(); }

  void Stop() override {
    std::lock_guard<std::mutex> stop_lock(stop_mu_);
    if (stopped_) return;
    stopped_ = true;
    net::post(acceptor_.get_executor(), [this] {
      beast::error_code ec;
      acceptor_.close(ec);
    });
    // Take owning references under the lock but drop them outside it: the last reference to a
    // connection that is closing anyway runs ~Connection -> Unregister(), which locks mu_.
    std::vector<std::shared_ptr<Connection>> live;
    std::vector<std::shared_ptr<WsSession>> sockets;
    {
      std::lock_guard<std::mutex> lock(mu_);
      live.reserve(connections_.size());
      for (auto& [ptr, weak] : connections_) {
        if (std::shared_ptr<Connection> c = weak.lock()) live.push_back(std::move(c));
      }
      for (auto& [ptr, weak] : sessions_) {
        if (std::shared_ptr<WsSession> w = weak.lock()) sockets.push_back(std::move(w));
      }
    }
    for (const std::shared_ptr<Connection>& c : live) c->PostClose();
    for (const std::shared_ptr<WsSession>& w : sockets) {
      net::post(w->executor(), [w] { w->OnClose(1001, "server shutting down"); });
    }
    live.clear();
    sockets.clear();
    work_.reset();
    // Closing sockets ends every pending operation; give them a moment, then stop hard.
    for (int i = 0; i < 200 && open_.load() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ioc_.stop();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // For connections.
  const HttpOptions& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  const UpgradeHandler& upgrade() const { return upgrade_; }
  // A WebSocket session counts as an open connection while it lives.
  void RegisterSession(WsSession* s, std::weak_ptr<WsSession> weak) override {
    std::lock_guard<std::mutex> lock(mu_);
    sessions_[s] = std::move(weak);
    open_.fetch_add(1);
    metrics_.connections_open.Increment();
  }
  void UnregisterSession(WsSession* s) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      sessions_.erase(s);
    }
    open_.fetch_sub(1);
    metrics_.connections_open.Decrement();
  }
  GatewayMetrics& metrics() const { return metrics_; }
  void Register(Connection* c, std::weak_ptr<Connection> weak) {
    std::lock_guard<std::mutex> lock(mu_);
    connections_[c] = std::move(weak);
  }
  void Unregister(Connection* c) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      connections_.erase(c);
    }
    open_.fetch_sub(1);
    metrics_.connections_open.Decrement();
  }
  void CountSlowClient() { metrics_.slow_clients_closed_total.Increment(); }
  void CountReadPause() { metrics_.stream_read_pauses_total.Increment(); }
  void AddPendingWriteBytes(int64_t delta) {
    metrics_.pending_write_bytes.Increment(static_cast<double>(delta));
  }
  // Unsent bytes of a stream above which its backend stream is not read (HttpOptions).
  int64_t stream_read_pause_bytes() const { return options_.EffectiveStreamReadPauseBytes(); }
  void CountResponse(int status) {
    metrics_.http_responses_total.Add({{"code", absl::StrCat(status)}}).Increment();
  }

 private:
  // A connection past max_connections: 503 + Retry-After (without reading its request), then a
  // lingering close. At most max_connections of these at once; past that the socket is closed.
  void Refuse(tcp::socket s) {
    metrics_.rejected_total.Add({{"reason", "connections"}}).Increment();
    if (refusing_.fetch_add(1) >= options_.max_connections) {
      refusing_.fetch_sub(1);
      beast::error_code ignored;
      s.close(ignored);
      return;
    }
    CountResponse(503);
    auto stream = std::make_shared<beast::tcp_stream>(std::move(s));
    ApiError error = ApiError::Overloaded("Too many connections; retry later.",
                                          std::max(1, options_.retry_after_s));
    auto bytes = std::make_shared<std::string>(absl::StrCat(
        "HTTP/1.1 503 Service Unavailable\r\nServer: moe-gateway\r\n"
        "Content-Type: application/json\r\nRetry-After: ",
        error.retry_after_s, "\r\nConnection: close\r\nContent-Length: ", error.ToJson().size(),
        "\r\n\r\n", error.ToJson()));
    stream->expires_after(std::chrono::seconds(2));
    net::async_write(*stream, net::buffer(*bytes),
                     [this, stream, bytes](beast::error_code ec, size_t) {
                       beast::error_code ignored;
                       if (ec) {
                         stream->close();
                         refusing_.fetch_sub(1);
                         return;
                       }
                       stream->socket().shutdown(tcp::socket::shutdown_send, ignored);
                       LingerRefused(stream);
                     });
  }
  // Reads what the refused client still sends until it closes (or 2 s), so that the kernel does
  // not answer it with a reset that destroys the 503.
  void LingerRefused(std::shared_ptr<beast::tcp_stream> stream) {
    auto buf = std::make_shared<std::array<char, 4096>>();
    stream->async_read_some(net::buffer(*buf), [this, stream, buf](beast::error_code ec, size_t) {
      if (ec) {
        stream->close();
        refusing_.fetch_sub(1);
      } else {
        LingerRefused(stream);
      }
    });
  }

  void DoAccept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
        MOE_LOG_WARN("gateway: accept failed: {}", ec.message());
        DoAccept();
        return;
      }
      if (open_.load() >= options_.max_connections) {
        Refuse(std::move(s));
      } else {
        open_.fetch_add(1);
        metrics_.connections_open.Increment();
        s.set_option(tcp::no_delay(true), ec);
        auto conn = std::make_shared<Connection>(std::move(s), this);
        Register(conn.get(), conn);
        conn->Start();
      }
      DoAccept();
    });
  }

  const HttpOptions options_;
  const Handler handler_;
  const UpgradeHandler upgrade_;
  GatewayMetrics& metrics_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::atomic<int64_t> open_{0};
  std::atomic<int64_t> refusing_{0};  // refused connections still being answered
  std::mutex mu_;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections_;
  std::unordered_map<WsSession*, std::weak_ptr<WsSession>> sessions_;
  std::mutex stop_mu_;
  bool stopped_ = false;
};

Connection::Connection(tcp::socket socket, Server* server)
    : stream_(std::move(socket)), server_(server) {
  beast::error_code ec;
  const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
  if (!ec) client_ = peer.address().to_string();
}

Connection::~Connection() {
  if (out_bytes_ != 0) server_->AddPendingWriteBytes(-out_bytes_);
  server_->Unregister(this);
}

void Connection::PostClose() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->ClientGone(); });
}

void Connection::DoRead() {
  state_ = State::kReading;
  parser_.emplace();
  // Beast checks a Content-Length against the limit while it parses the header, before the
  // type is known: the larger limit here, the one for this request in OnHeader.
  parser_->body_limit(static_cast<uint64_t>(
      std::max(server_->options().max_body_bytes, server_->options().max_upload_bytes)));
  parser_->header_limit(static_cast<uint32_t>(server_->options().max_header_bytes));
  stream_.expires_after(
      std::chrono::microseconds(absl::ToInt64Microseconds(server_->options().idle_timeout)));
  http::async_read_header(
      stream_, buffer_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void Connection::OnHeader(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (!ec) {
    // Audio uploads are larger than API bodies: their limit applies once the type is known.
    const auto& h = parser_->get();
    const auto it = h.find(http::field::content_type);
    const bool upload =
        it != h.end() && beast::iequals(it->value().substr(0, 19), "multipart/form-data");
    const uint64_t limit = static_cast<uint64_t>(upload ? server_->options().max_upload_bytes
                                                        : server_->options().max_body_bytes);
    // Too large by its Content-Length: refused before any of the body is read.
    if (parser_->content_length() && *parser_->content_length() > limit) {
      OnRead(http::error::body_limit);
      return;
    }
    parser_->body_limit(limit);  // chunked bodies: checked as they arrive
    // Room for the body up front (<= 64 KiB): a growing buffer reads 512 bytes per wake-up.
    if (parser_->content_length()) {
      buffer_.reserve(buffer_.size() +
                      static_cast<size_t>(std::min<uint64_t>(*parser_->content_length(), 65536)));
    }
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec2, size_t) { self->OnRead(ec2); });
    return;
  }
  OnRead(ec);
}

void Connection::OnRead(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec == http::error::body_limit) {
    const bool upload = parser_->get().count(http::field::content_type) &&
                        beast::iequals(parser_->get()[http::field::content_type].substr(0, 19),
                                       "multipart/form-data");
    ApiError e = ApiError::LimitExceeded(
        "", upload ? "http.max_upload_bytes" : "http.max_body_bytes",
        upload ? server_->options().max_upload_bytes : server_->options().max_body_bytes,
        "The request body is too large.");
    e.http_status = 413;
    e.code = "request_too_large";
    SendError(e);
    return;
  }
  if (ec == http::error::header_limit) {
    ApiError e =
        ApiError::LimitExceeded("", "http.max_header_bytes", server_->options().max_header_bytes,
                                "The request headers are too large.");
    e.http_status = 431;
    e.code = "request_header_fields_too_large";
    SendError(e);
    return;
  }
  if (ec) {
    // end_of_stream, timeouts and resets end the connection; a malformed request gets a 400.
    const bool bad_request =
        ec.category() == http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream && ec != http::error::partial_message;
    if (bad_request) {
      SendError(ApiError::InvalidRequest(absl::StrCat("Malformed HTTP request: ", ec.message())));
    } else {
      Close();
    }
    return;
  }
  http::request<http::string_body> req = parser_->release();
  parser_.reset();
  keep_alive_ = req.keep_alive();
  if (const int64_t fields = std::distance(req.begin(), req.end());
      fields > server_->options().max_header_fields) {
    ApiError e =
        ApiError::LimitExceeded("", "http.max_header_fields", server_->options().max_header_fields,
                                absl::StrCat("The request has ", fields, " header fields."));
    e.http_status = 431;
    e.code = "request_header_fields_too_large";
    SendError(e);
    return;
  }
  HttpRequest request;
  request.method = std::string(req.method_string());
  request.target = std::string(req.target());
  if (auto it = req.find(http::field::authorization); it != req.end()) {
    request.authorization = std::string(it->value());
  }
  request.client = client_;
  if (auto it = req.find(kRequestIdHeader); it != req.end()) {
    request.request_id = std::string(it->value());
  }
  for (const auto& field : req) {
    std::string name(field.name_string());
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    request.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  if (websocket::is_upgrade(req) && server_->upgrade()) {
    Upgrade(std::move(req), std::move(request));
    return;
  }
  request.body = std::move(req.body());
  state_ = State::kHandling;
  ++seq_;
  response_complete_ = false;
  stream_.expires_never();
  WatchForDisconnect(seq_);
  auto writer = std::make_shared<Writer>(weak_from_this(), seq_);
  cancel_ = server_->handler()(std::move(request), std::move(writer));
}

void Connection::Upgrade(http::request<http::string_body> req, HttpRequest request) {
  auto session = std::make_shared<WsSession>(
      std::move(stream_), *server_,
      WsSessionLimits{.max_message_bytes = server_->options().max_ws_message_bytes,
                      .max_send_queue_bytes = server_->options().max_ws_send_queue_bytes});
  handed_over_ = true;
  state_ = State::kClosed;
  UpgradeResult result =
      server_->upgrade()(request, std::make_shared<WsWriter>(session->weak_from_this()));
  if (result.handler == nullptr) {
    // Answer on the socket the session now holds, then drop it.
    HttpResponse r = std::move(result.rejection);
    http::response<http::string_body> res;
    res.result(static_cast<unsigned>(r.status));
    res.version(11);
    res.set(http::field::server, "moe-gateway");
    res.set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.body() = std::move(r.body);
    res.keep_alive(false);
    res.prepare_payload();
    server_->CountResponse(r.status);
    session->Reject(std::move(res));
    return;
  }
  server_->CountResponse(101);
  session->Accept(std::move(req), std::move(result.handler), std::move(result.subprotocol));
}

void Connection::WatchForDisconnect(uint64_t seq) {
  stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), seq](beast::error_code ec) {
        if (ec || self->seq_ != seq ||
            (self->state_ != State::kHandling && self->state_ != State::kStreaming)) {
          return;
        }
        char byte;
        const ssize_t n =
            ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          self->ClientGone();  // the peer closed or reset
        } else if (n < 0) {
          self->WatchForDisconnect(seq);
        }
        // n > 0: a pipelined request waits; it is read after this response.
      });
}

std::string Connection::Header(int status, const std::string& content_type,
                               const HttpHeaders& extra, std::optional<size_t> content_length,
                               bool chunked) {
  http::response<http::empty_body> res;
  res.result(static_cast<unsigned>(status));
  res.version(11);
  res.set(http::field::server, "moe-gateway");
  res.set(http::field::content_type, content_type);
  for (const auto& [k, v] : extra) res.set(k, v);
  if (content_length) res.content_length(*content_length);
  if (chunked) res.chunked(true);
  res.keep_alive(keep_alive_);
  std::ostringstream os;
  os << res.base();
  server_->CountResponse(status);
  return os.str();
}

void Connection::SendError(const ApiError& error) {
  keep_alive_ = false;
  state_ = State::kHandling;
  ++seq_;
  OnSend(seq_, error.ToResponse());
}

void Connection::OnSend(uint64_t seq, HttpResponse response) {
  if (seq != seq_ || state_ != State::kHandling) return;
  state_ = State::kDone;
  std::string bytes =
      Header(response.status, response.content_type, response.headers, response.body.size(), false);
  bytes += response.body;
  response_complete_ = true;
  Enqueue(std::move(bytes));
}

void Connection::OnStartStream(uint64_t seq, int status, HttpHeaders headers) {
  if (seq != seq_ || state_ != State::kHandling) return;
  state_ = State::kStreaming;
  headers.emplace_back("X-Accel-Buffering", "no");
  // Server-Sent Events unless the core names another type (streamed audio).
  std::string content_type = "text/event-stream; charset=utf-8";
  for (auto it = headers.begin(); it != headers.end(); ++it) {
    if (beast::iequals(it->first, "content-type")) {
      content_type = it->second;
      headers.erase(it);
      break;
    }
  }
  // The first chunk is usually posted right behind (CompletionSession starts the stream with
  // its first token): headers and chunk in one send, one wake-up of the client instead of two.
  Enqueue(Header(status, content_type, headers, std::nullopt, true), /*defer=*/true);
}

void Connection::OnWrite(uint64_t seq, std::string data) {
  if (seq != seq_ || state_ != State::kStreaming || data.empty()) return;
  std::string chunk = absl::StrFormat("%x\r\n", data.size());
  chunk += data;
  chunk += "\r\n";
  Enqueue(std::move(chunk));
}

void Connection::OnEnd(uint64_t seq) {
  if (seq != seq_ || state_ != State::kStreaming) return;
  state_ = State::kDone;
  response_complete_ = true;
  Enqueue("0\r\n\r\n");
}

void Connection::AddOutBytes(int64_t delta) {
  out_bytes_ += delta;
  server_->AddPendingWriteBytes(delta);
}

void Connection::Enqueue(std::string bytes, bool defer) {
  if (state_ == State::kClosed) return;
  AddOutBytes(static_cast<int64_t>(bytes.size()));
  if (out_bytes_ > server_->options().max_pending_write_bytes) {
    // A client that does not read must not pin memory: drop it and cancel its generation.
    server_->CountSlowClient();
    ClientGone();
    return;
  }
  out_.push_back(std::move(bytes));
  if (writing_ || flush_posted_) return;  // OnWritten or the posted flush sends it
  if (!defer) {
    DoWrite();
    return;
  }
  flush_posted_ = true;
  net::post(stream_.get_executor(), [self = shared_from_this()] {
    self->flush_posted_ = false;
    if (self->state_ != State::kClosed && !self->writing_ && !self->out_.empty()) self->DoWrite();
  });
}

void Connection::OnWhenFlushed(uint64_t seq, std::function<void()> fn) {
  const bool pending = seq == seq_ && state_ != State::kClosed && (writing_ || !out_.empty());
  if (!pending) {
    fn();
    return;
  }
  if (on_flushed_) {
    std::function<void()> earlier = std::move(on_flushed_);
    earlier();
  }
  on_flushed_ = std::move(fn);
}

void Connection::OnWhenWritable(uint64_t seq, std::function<void()> fn) {
  if (seq != seq_ || state_ == State::kClosed || out_bytes_ <= server_->stream_read_pause_bytes()) {
    fn();
    return;
  }
  // The client is behind: the backend's stream is not read until the writes catch up.
  server_->CountReadPause();
  if (on_writable_) {
    std::function<void()> earlier = std::move(on_writable_);
    earlier();
  }
  on_writable_ = std::move(fn);
}

void Connection::RunWritable() {
  if (!on_writable_) return;
  std::function<void()> fn = std::move(on_writable_);
  on_writable_ = nullptr;
  fn();
}

void Connection::RunFlushed() {
  if (!on_flushed_) return;
  std::function<void()> fn = std::move(on_flushed_);
  on_flushed_ = nullptr;
  fn();
}

void Connection::DoWrite() {
  if (state_ == State::kClosed) return;
  writing_ = true;
  // Coalesce queued chunks into one write.
  if (out_.size() > 1) {
    std::string all;
    for (std::string& s : out_) all += s;
    out_.clear();
    out_.push_back(std::move(all));
  }
  // A write that makes no progress for write_timeout fails (and so closes the connection).
  stream_.expires_after(absl::ToChronoMilliseconds(server_->options().write_timeout));
  net::async_write(
      stream_, net::buffer(out_.front()),
      [self = shared_from_this()](beast::error_code ec, size_t) { self->OnWritten(ec); });
}

void Connection::OnWritten(beast::error_code ec) {
  writing_ = false;
  if (state_ == State::kClosed) return;
  if (ec) {
    if (ec == beast::error::timeout) server_->CountSlowClient();
    ClientGone();
    return;
  }
  AddOutBytes(-static_cast<int64_t>(out_.front().size()));
  out_.pop_front();
  if (state_ == State::kHandling || state_ == State::kStreaming) stream_.expires_never();
  if (out_bytes_ <= server_->stream_read_pause_bytes()) RunWritable();
  if (!out_.empty()) {
    DoWrite();
    return;
  }
  RunFlushed();
  if (response_complete_) FinishResponse();
}

void Connection::FinishResponse() {
  cancel_ = nullptr;
  response_complete_ = false;
  if (!keep_alive_) {
    LingeringClose();
    return;
  }
  // Ends the disconnect watch before reading the next request.
  beast::error_code ignored;
  stream_.socket().cancel(ignored);
  DoRead();
}

void Connection::ClientGone() {
  if (state_ == State::kClosed || handed_over_) return;
  if (cancel_) {
    CancelFn cancel = std::move(cancel_);
    cancel_ = nullptr;
    cancel();
  }
  Close();
}

void Connection::Close() {
  if (state_ == State::kClosed || handed_over_) return;
  state_ = State::kClosed;
  out_.clear();
  AddOutBytes(-out_bytes_);
  RunFlushed();
  RunWritable();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.close();
}

void Connection::LingeringClose() {
  // Half-close, then drain what the client still sends (e.g. the rest of an oversize body) so
  // the kernel does not answer it with a reset that would destroy our response.
  state_ = State::kDone;
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(std::chrono::seconds(2));
  Drain();
}

void Connection::Drain() {
  auto buf = std::make_shared<std::array<char, 4096>>();
  stream_.async_read_some(net::buffer(*buf),
                          [self = shared_from_this(), buf](beast::error_code ec, size_t) {
                            if (ec) {
                              self->Close();
                            } else {
                              self->Drain();
                            }
                          });
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              Handler handler,
                                                              GatewayMetrics& metrics) {
  return Start(options, std::move(handler), nullptr, metrics);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              Handler handler,
                                                              UpgradeHandler upgrade,
                                                              GatewayMetrics& metrics) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto server = std::make_unique<Server>(options, std::move(handler), std::move(upgrade), metrics);
  if (absl::Status s = server->Bind(); !s.ok()) return s;
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

absl::StatusOr<std::unique_ptr<HttpServer>> ServeGateway(const HttpOptions& options,
                                                         Gateway& gateway) {
  Gateway* core = &gateway;
  return HttpServer::Start(
      options,
      [core](HttpRequest request, std::shared_ptr<ResponseWriter> writer) {
        return core->Handle(std::move(request), std::move(writer));
      },
      [core](const HttpRequest& request, std::shared_ptr<WebSocketWriter> writer) {
        return core->Upgrade(request, std::move(writer));
      },
      core->metrics());
}

}  // namespace moe::gateway
