#include "services/gateway/http_server.h"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <deque>
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
#include "common/base/log.h"
#include "services/gateway/core/api_error.h"
#include "services/gateway/core/gateway_metrics.h"
#include "services/gateway/core/request_id.h"

namespace moe::gateway {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

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

  net::any_io_executor executor() { return stream_.get_executor(); }

 private:
  enum class State { kReading, kHandling, kStreaming, kDone, kClosed };

  void DoRead();
  void OnRead(beast::error_code ec);
  void WatchForDisconnect(uint64_t seq);
  void Enqueue(std::string bytes);
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
  bool response_complete_ = false;
  std::string client_;
};

class Writer final : public ResponseWriter {
 public:
  Writer(std::weak_ptr<Connection> conn, net::any_io_executor ex, uint64_t seq)
      : conn_(std::move(conn)), ex_(std::move(ex)), seq_(seq) {}
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

 private:
  template <typename F>
  void Post(F f) {
    std::shared_ptr<Connection> conn = conn_.lock();
    if (!conn) return;
    net::post(ex_, [conn = std::move(conn), f = std::move(f)]() mutable { f(*conn); });
  }
  const std::weak_ptr<Connection> conn_;
  const net::any_io_executor ex_;
  const uint64_t seq_;
};

class Server final : public HttpServer {
 public:
  Server(const HttpOptions& options, Handler handler, GatewayMetrics& metrics)
      : options_(options),
        handler_(std::move(handler)),
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
    {
      std::lock_guard<std::mutex> lock(mu_);
      live.reserve(connections_.size());
      for (auto& [ptr, weak] : connections_) {
        if (std::shared_ptr<Connection> c = weak.lock()) live.push_back(std::move(c));
      }
    }
    for (const std::shared_ptr<Connection>& c : live) c->PostClose();
    live.clear();
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
  void CountResponse(int status) {
    metrics_.http_responses_total.Add({{"code", absl::StrCat(status)}}).Increment();
  }

 private:
  void DoAccept() {
    acceptor_.async_accept(net::make_strand(ioc_), [this](beast::error_code ec, tcp::socket s) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
        MOE_LOG_WARN("gateway: accept failed: {}", ec.message());
        DoAccept();
        return;
      }
      if (open_.load() >= options_.max_connections) {
        beast::error_code ignored;
        s.close(ignored);
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
  GatewayMetrics& metrics_;
  net::io_context ioc_;
  tcp::acceptor acceptor_;
  net::executor_work_guard<net::io_context::executor_type> work_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::atomic<int64_t> open_{0};
  std::mutex mu_;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> connections_;
  std::mutex stop_mu_;
  bool stopped_ = false;
};

Connection::Connection(tcp::socket socket, Server* server)
    : stream_(std::move(socket)), server_(server) {
  beast::error_code ec;
  const tcp::endpoint peer = stream_.socket().remote_endpoint(ec);
  if (!ec) client_ = peer.address().to_string();
}

Connection::~Connection() { server_->Unregister(this); }

void Connection::PostClose() {
  net::post(stream_.get_executor(), [self = shared_from_this()] { self->ClientGone(); });
}

void Connection::DoRead() {
  state_ = State::kReading;
  parser_.emplace();
  parser_->body_limit(static_cast<uint64_t>(server_->options().max_body_bytes));
  parser_->header_limit(static_cast<uint32_t>(server_->options().max_header_bytes));
  stream_.expires_after(
      std::chrono::microseconds(absl::ToInt64Microseconds(server_->options().idle_timeout)));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnRead(ec); });
}

void Connection::OnRead(beast::error_code ec) {
  if (state_ == State::kClosed) return;
  if (ec == http::error::body_limit) {
    SendError(ApiError::TooLarge(
        absl::StrCat("The request body exceeds ", server_->options().max_body_bytes, " bytes.")));
    return;
  }
  if (ec == http::error::header_limit) {
    ApiError e = ApiError::InvalidRequest("The request headers are too large.");
    e.http_status = 431;
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
  request.body = std::move(req.body());
  state_ = State::kHandling;
  ++seq_;
  response_complete_ = false;
  stream_.expires_never();
  WatchForDisconnect(seq_);
  auto writer = std::make_shared<Writer>(weak_from_this(), stream_.get_executor(), seq_);
  cancel_ = server_->handler()(std::move(request), std::move(writer));
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
  Enqueue(Header(status, "text/event-stream; charset=utf-8", headers, std::nullopt, true));
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

void Connection::Enqueue(std::string bytes) {
  if (state_ == State::kClosed) return;
  out_bytes_ += static_cast<int64_t>(bytes.size());
  if (out_bytes_ > server_->options().max_pending_write_bytes) {
    // A client that does not read must not pin memory: drop it and cancel its generation.
    server_->CountSlowClient();
    ClientGone();
    return;
  }
  out_.push_back(std::move(bytes));
  if (!writing_) DoWrite();
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
  out_bytes_ -= static_cast<int64_t>(out_.front().size());
  out_.pop_front();
  if (state_ == State::kHandling || state_ == State::kStreaming) stream_.expires_never();
  if (!out_.empty()) {
    DoWrite();
    return;
  }
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
  if (state_ == State::kClosed) return;
  if (cancel_) {
    CancelFn cancel = std::move(cancel_);
    cancel_ = nullptr;
    cancel();
  }
  Close();
}

void Connection::Close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  out_.clear();
  out_bytes_ = 0;
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
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto server = std::make_unique<Server>(options, std::move(handler), metrics);
  if (absl::Status s = server->Bind(); !s.ok()) return s;
  server->Run();
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace moe::gateway
