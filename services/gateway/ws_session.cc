#include "services/gateway/ws_session.h"

#include <utility>

namespace moe::gateway::internal {

using tcp = net::ip::tcp;

WsSession::WsSession(beast::tcp_stream stream, WsSessionRegistry& registry, WsSessionLimits limits)
    : ws_(std::move(stream)), registry_(registry), limits_(limits) {}

WsSession::~WsSession() {
  if (open_) registry_.UnregisterSession(this);
}

void WsSession::Reject(http::response<http::string_body> res) {
  auto r = std::make_shared<http::response<http::string_body>>(std::move(res));
  http::async_write(ws_.next_layer(), *r,
                    [self = shared_from_this(), r](beast::error_code, size_t) {
                      beast::error_code ignored;
                      self->ws_.next_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
                      self->ws_.next_layer().close();
                    });
}

void WsSession::Accept(http::request<http::string_body> req,
                       std::shared_ptr<WebSocketHandler> handler, std::string subprotocol) {
  handler_ = std::move(handler);
  open_ = true;
  registry_.RegisterSession(this, weak_from_this());
  ws_.next_layer().expires_never();
  // Pings keep idle sessions alive through proxies; a peer silent past the timeout is gone.
  ws_.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  ws_.set_option(websocket::stream_base::decorator([subprotocol](websocket::response_type& res) {
    res.set(http::field::server, "moe-gateway");
    if (!subprotocol.empty()) res.set(http::field::sec_websocket_protocol, subprotocol);
  }));
  ws_.read_message_max(static_cast<uint64_t>(limits_.max_message_bytes));
  auto r = std::make_shared<http::request<http::string_body>>(std::move(req));
  ws_.async_accept(*r, [self = shared_from_this(), r](beast::error_code ec) {
    if (ec) {
      self->Finish();
      return;
    }
    self->DoRead();
    if (!self->out_.empty() && !self->writing_) self->DoWrite();
  });
}

void WsSession::DoRead() {
  ws_.async_read(buffer_, [self = shared_from_this()](beast::error_code ec, size_t) {
    if (ec) {
      self->Finish();
      return;
    }
    std::string message = beast::buffers_to_string(self->buffer_.data());
    self->buffer_.consume(self->buffer_.size());
    if (self->handler_ != nullptr) {
      if (self->ws_.got_text()) {
        self->handler_->OnText(std::move(message));
      } else {
        self->handler_->OnBinary(std::move(message));
      }
    }
    self->DoRead();
  });
}

void WsSession::OnSendText(std::string text) {
  if (finished_ || closing_) return;
  queued_bytes_ += static_cast<int64_t>(text.size());
  if (queued_bytes_ > limits_.max_send_queue_bytes) {
    // The client does not read: drop what is queued and end the session.
    out_.clear();
    queued_bytes_ = 0;
    OnClose(1008, "client too slow: send queue full");
    return;
  }
  out_.push_back({.data = std::move(text)});
  if (!writing_ && ws_.is_open()) DoWrite();
}

void WsSession::OnClose(uint16_t code, std::string reason) {
  if (finished_ || closing_) return;
  closing_ = true;
  if (reason.size() > 123) reason.resize(123);
  out_.push_back({.close = true, .code = code, .data = std::move(reason)});
  if (!writing_ && ws_.is_open()) DoWrite();
}

void WsSession::DoWrite() {
  if (out_.empty() || finished_) return;
  writing_ = true;
  Out& front = out_.front();
  if (front.close) {
    ws_.async_close(
        websocket::close_reason(static_cast<websocket::close_code>(front.code), front.data),
        [self = shared_from_this()](beast::error_code) {
          self->writing_ = false;
          self->out_.clear();
          // The read loop ends when the peer answers the close (or the timeout).
        });
    return;
  }
  ws_.text(true);
  ws_.async_write(net::buffer(front.data),
                  [self = shared_from_this()](beast::error_code ec, size_t) {
                    self->writing_ = false;
                    if (ec) {
                      self->out_.clear();
                      return;  // the read side sees the failure too and finishes
                    }
                    self->queued_bytes_ -= static_cast<int64_t>(self->out_.front().data.size());
                    self->out_.pop_front();
                    self->DoWrite();
                  });
}

void WsSession::Finish() {
  if (finished_) return;
  finished_ = true;
  out_.clear();
  std::shared_ptr<WebSocketHandler> handler = std::move(handler_);
  if (handler != nullptr) handler->OnClosed();
  beast::error_code ignored;
  ws_.next_layer().socket().shutdown(tcp::socket::shutdown_both, ignored);
  ws_.next_layer().close();
}

}  // namespace moe::gateway::internal
