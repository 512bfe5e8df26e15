// A WebSocket session of the gateway's HTTP server (http_server.cc hands the socket over after
// an upgrade): the handshake, reads into a WebSocketHandler, a bounded send queue (WsWriter posts
// to it from any thread), close frames. Beast lives here and in http_server.cc only.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>  // before Boost.Asio: its awaitable.hpp uses std::exchange

#include "boost/asio.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "boost/beast/websocket.hpp"
#include "services/gateway/http_server.h"

namespace moe::gateway::internal {

namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
namespace net = boost::asio;

class WsSession;

// What a session needs of the server that accepted it: a session counts as an open connection
// while it lives, and the server closes the registered ones when it stops. Thread-safe.
class WsSessionRegistry {
 public:
  virtual void RegisterSession(WsSession* s, std::weak_ptr<WsSession> weak) = 0;
  virtual void UnregisterSession(WsSession* s) = 0;

 protected:
  ~WsSessionRegistry() = default;
};

// HttpOptions' WebSocket limits (gateway_options.h).
struct WsSessionLimits {
  int64_t max_message_bytes = 0;     // one message read
  int64_t max_send_queue_bytes = 0;  // unsent output; past it the session closes (1008)
};

// One WebSocket (after the upgrade). All members are used on the socket's strand only.
class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  // `registry` (the server) outlives the session.
  WsSession(beast::tcp_stream stream, WsSessionRegistry& registry, WsSessionLimits limits);
  ~WsSession();

  // Completes the handshake of `req` (with `subprotocol` when not empty), then reads messages
  // into `handler` until the socket ends.
  void Accept(http::request<http::string_body> req, std::shared_ptr<WebSocketHandler> handler,
              std::string subprotocol);
  // From any thread (WsWriter and Server::Stop post here).
  void OnSendText(std::string text);
  void OnClose(uint16_t code, std::string reason);
  // Answers the upgrade request with `res` instead and closes.
  void Reject(http::response<http::string_body> res);
  net::any_io_executor executor() { return ws_.get_executor(); }

 private:
  void DoRead();
  void DoWrite();
  void Finish();

  websocket::stream<beast::tcp_stream> ws_;
  WsSessionRegistry& registry_;
  const WsSessionLimits limits_;
  std::shared_ptr<WebSocketHandler> handler_;
  beast::flat_buffer buffer_;
  struct Out {
    bool close = false;
    uint16_t code = 1000;
    std::string data;
  };
  std::deque<Out> out_;
  int64_t queued_bytes_ = 0;
  bool open_ = false;  // handshake done
  bool writing_ = false;
  bool closing_ = false;  // a close frame is queued or sent
  bool finished_ = false;
};

class WsWriter final : public WebSocketWriter {
 public:
  explicit WsWriter(std::weak_ptr<WsSession> session) : session_(std::move(session)) {}
  void SendText(std::string message) override {
    if (std::shared_ptr<WsSession> s = session_.lock()) {
      net::post(s->executor(),
                [s, m = std::move(message)]() mutable { s->OnSendText(std::move(m)); });
    }
  }
  void Close(uint16_t code, std::string reason) override {
    if (std::shared_ptr<WsSession> s = session_.lock()) {
      net::post(s->executor(),
                [s, code, r = std::move(reason)]() mutable { s->OnClose(code, std::move(r)); });
    }
  }

 private:
  const std::weak_ptr<WsSession> session_;
};

}  // namespace moe::gateway::internal
