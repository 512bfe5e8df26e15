#include "services/gateway/core/request_id.h"

#include <utility>

#include "common/base/log.h"
#include "nlohmann/json.hpp"

namespace moe::gateway {
namespace {

// `{"error": {...}}` with error.request_id set; the text unchanged when it is not such an object.
std::string WithIdInError(const std::string& json_text, const std::string& id) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("error") || !j["error"].is_object()) {
    return json_text;
  }
  j["error"]["request_id"] = id;
  return j.dump();
}

class RequestIdWriter final : public ResponseWriter {
 public:
  RequestIdWriter(std::shared_ptr<ResponseWriter> inner, std::string id, std::string what)
      : inner_(std::move(inner)), id_(std::move(id)), what_(std::move(what)) {}

  // ResponseWriter
  void Send(HttpResponse response) override {
    response.headers.emplace_back(kRequestIdHeader, id_);
    if (response.status >= 400 && response.content_type.starts_with("application/json")) {
      response.body = WithIdInError(response.body, id_);
    }
    Log(response.status);
    inner_->Send(std::move(response));
  }
  void StartStream(int status, HttpHeaders headers) override {
    status_ = status;
    headers.emplace_back(kRequestIdHeader, id_);
    inner_->StartStream(status, std::move(headers));
  }
  void Write(std::string data) override {
    // A failure after the stream started is an SSE event `data: {"error": ...}`.
    constexpr std::string_view kErrorEvent = "data: {\"error\"";
    if (data.starts_with(kErrorEvent)) {
      const size_t end = data.find("\n\n");
      const std::string payload = data.substr(6, end == std::string::npos ? end : end - 6);
      data = "data: " + WithIdInError(payload, id_) + "\n\n";
      failed_ = true;
    }
    inner_->Write(std::move(data));
  }
  void End() override {
    Log(failed_ ? 500 : status_);
    inner_->End();
  }
  // Forwarded: the slot a session holds is released when the socket's bytes drain.
  void WhenFlushed(std::function<void()> fn) override { inner_->WhenFlushed(std::move(fn)); }
  // Forwarded: a stream's backend reads pause while the socket is behind.
  void WhenWritable(std::function<void()> fn) override { inner_->WhenWritable(std::move(fn)); }

 private:
  void Log(int status) const {
    if (status >= 500) {
      MOE_LOG_WARN("gateway: {} {} -> {}", id_, what_, status);
    } else {
      MOE_LOG_INFO("gateway: {} {} -> {}", id_, what_, status);
    }
  }

  const std::shared_ptr<ResponseWriter> inner_;
  const std::string id_;
  const std::string what_;
  // Written only by the calls for this request, which are serialised (ResponseWriter contract).
  int status_ = 200;
  bool failed_ = false;
};

}  // namespace

bool IsValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == ':' || c == '/' || c == '+' || c == '=' ||
                    c == '-';
    if (!ok) return false;
  }
  return true;
}

std::shared_ptr<ResponseWriter> WithRequestId(std::shared_ptr<ResponseWriter> writer,
                                              std::string request_id, std::string what) {
  return std::make_shared<RequestIdWriter>(std::move(writer), std::move(request_id),
                                           std::move(what));
}

}  // namespace moe::gateway
