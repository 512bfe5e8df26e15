#include "services/operator/kube/http_kube_client.h"

#include <openssl/pem.h>
#include <openssl/x509.h>

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/file.h"
#include "common/base/log.h"
#include "httplib.h"

namespace moe::op::kube {

std::string Resource::Path(const std::string& ns, const std::string& name,
                           const std::string& subresource) const {
  std::string p =
      api_version.find('/') == std::string::npos ? "/api/" + api_version : "/apis/" + api_version;
  if (namespaced && !ns.empty()) absl::StrAppend(&p, "/namespaces/", ns);
  absl::StrAppend(&p, "/", plural);
  if (!name.empty()) absl::StrAppend(&p, "/", name);
  if (!subresource.empty()) absl::StrAppend(&p, "/", subresource);
  return p;
}

absl::Status StatusFromHttp(int code, const std::string& body) {
  if (code >= 200 && code < 300) return absl::OkStatus();
  std::string message = body;
  std::string reason;
  try {
    const Json j = Json::parse(body);
    message = j.value("message", body);
    reason = j.value("reason", "");
  } catch (const Json::exception&) {
  }
  message = absl::StrCat("HTTP ", code, reason.empty() ? "" : " " + reason, ": ", message);
  switch (code) {
    case 400:
    case 422:
      return absl::InvalidArgumentError(message);
    case 401:
      return absl::UnauthenticatedError(message);
    case 403:
      return absl::PermissionDeniedError(message);
    case 404:
      return absl::NotFoundError(message);
    case 409:
      return reason == "AlreadyExists" ? absl::AlreadyExistsError(message)
                                       : absl::AbortedError(message);
    case 410:
      return absl::OutOfRangeError(message);
    default:
      return code == 429 || code >= 500 ? absl::UnavailableError(message)
                                        : absl::UnknownError(message);
  }
}

namespace {

std::string Encode(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

// Sets apiVersion and kind on list items (the API leaves them out).
void FillKinds(Json& list) {
  std::string kind = list.value("kind", "");
  if (absl::EndsWith(kind, "List")) kind.resize(kind.size() - 4);
  const std::string api_version = list.value("apiVersion", "");
  if (!list.contains("items") || !list["items"].is_array()) return;
  for (Json& item : list["items"]) {
    if (!item.contains("kind")) item["kind"] = kind;
    if (!item.contains("apiVersion")) item["apiVersion"] = api_version;
  }
}

}  // namespace

struct HttpKubeClient::Metrics {
  explicit Metrics(common::metrics::Registry& r)
      : requests(r.CounterFamily("moe_operator_api_requests_total",
                                 "Kubernetes API requests by verb and HTTP status.")),
        seconds(r.HistogramFamily("moe_operator_api_request_seconds",
                                  "Kubernetes API request latency (watches excluded), seconds.")) {}
  void Count(const char* verb, int code, absl::Duration took) {
    requests.Add({{"verb", verb}, {"code", code > 0 ? absl::StrCat(code) : "error"}}).Increment();
    if (std::string(verb) != "watch") {
      seconds.Add({{"verb", verb}}, common::metrics::LatencyBuckets())
          .Observe(absl::ToDoubleSeconds(took));
    }
  }
  common::metrics::Family<common::metrics::Counter>& requests;
  common::metrics::Family<common::metrics::Histogram>& seconds;
};

HttpKubeClient::HttpKubeClient(KubeConfig config, HttpKubeClientOptions options,
                               common::metrics::Registry& registry)
    : config_(std::move(config)),
      options_(std::move(options)),
      metrics_(std::make_unique<Metrics>(registry)) {}

HttpKubeClient::~HttpKubeClient() { CancelWatches(); }

absl::StatusOr<std::unique_ptr<httplib::ClientImpl>> HttpKubeClient::Connect(
    absl::Duration read_timeout) {
  std::unique_ptr<httplib::ClientImpl> cli;
  if (config_.tls) {
    X509* cert = nullptr;
    EVP_PKEY* key = nullptr;
    if (!config_.client_cert_pem.empty()) {
      BIO* b = BIO_new_mem_buf(config_.client_cert_pem.data(),
                               static_cast<int>(config_.client_cert_pem.size()));
      cert = PEM_read_bio_X509(b, nullptr, nullptr, nullptr);
      BIO_free(b);
      b = BIO_new_mem_buf(config_.client_key_pem.data(),
                          static_cast<int>(config_.client_key_pem.size()));
      key = PEM_read_bio_PrivateKey(b, nullptr, nullptr, nullptr);
      BIO_free(b);
      if (cert == nullptr || key == nullptr) {
        X509_free(cert);
        EVP_PKEY_free(key);
        return absl::InvalidArgumentError("client certificate or key is not PEM");
      }
    }
    auto ssl = cert != nullptr
                   ? std::make_unique<httplib::SSLClient>(config_.host, config_.port, cert, key)
                   : std::make_unique<httplib::SSLClient>(config_.host, config_.port);
    X509_free(cert);  // SSLClient took its own references
    EVP_PKEY_free(key);
    if (!config_.ca_pem.empty()) {
      X509_STORE* store = X509_STORE_new();
      BIO* b = BIO_new_mem_buf(config_.ca_pem.data(), static_cast<int>(config_.ca_pem.size()));
      int n = 0;
      while (X509* ca = PEM_read_bio_X509(b, nullptr, nullptr, nullptr)) {
        X509_STORE_add_cert(store, ca);
        X509_free(ca);
        ++n;
      }
      BIO_free(b);
      if (n == 0) {
        X509_STORE_free(store);
        return absl::InvalidArgumentError("certificate authority is not PEM");
      }
      ssl->set_ca_cert_store(store);  // owned by the client's SSL_CTX
    }
    ssl->enable_server_certificate_verification(!config_.insecure_skip_tls_verify);
    cli = std::move(ssl);
  } else {
    cli = std::make_unique<httplib::ClientImpl>(config_.host, config_.port);
  }
  std::string token = config_.token;
  if (!config_.token_file.empty()) {
    if (auto t = common::ReadFile(config_.token_file); t.ok()) token = *t;
  }
  token = std::string(absl::StripAsciiWhitespace(token));
  if (!token.empty()) cli->set_bearer_token_auth(token);
  cli->set_connection_timeout(std::chrono::seconds(10));
  cli->set_read_timeout(absl::ToChronoSeconds(read_timeout));
  cli->set_write_timeout(absl::ToChronoSeconds(options_.timeout));
  cli->set_keep_alive(false);
  cli->set_default_headers({{"User-Agent", options_.user_agent}, {"Accept", "application/json"}});
  return cli;
}

absl::StatusOr<Json> HttpKubeClient::Call(const char* verb, const std::string& method,
                                          const std::string& path, const std::string& body,
                                          const std::string& content_type) {
  auto cli = Connect(options_.timeout);
  if (!cli.ok()) return cli.status();
  const absl::Time start = absl::Now();
  httplib::ClientImpl& c = **cli;
  httplib::Result res = method == "GET"     ? c.Get(path.c_str())
                        : method == "POST"  ? c.Post(path.c_str(), body, content_type.c_str())
                        : method == "PUT"   ? c.Put(path.c_str(), body, content_type.c_str())
                        : method == "PATCH" ? c.Patch(path.c_str(), body, content_type.c_str())
                                            : c.Delete(path.c_str());
  if (!res) {
    metrics_->Count(verb, 0, absl::Now() - start);
    return absl::UnavailableError(
        absl::StrCat(method, " ", path, ": ", httplib::to_string(res.error())));
  }
  metrics_->Count(verb, res->status, absl::Now() - start);
  if (auto s = StatusFromHttp(res->status, res->body); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(method, " ", path, ": ", s.message()));
  }
  try {
    return res->body.empty() ? Json::object() : Json::parse(res->body);
  } catch (const Json::exception& e) {
    return absl::InternalError(absl::StrCat(method, " ", path, ": bad JSON: ", e.what()));
  }
}

absl::StatusOr<Json> HttpKubeClient::Get(const Resource& r, const std::string& ns,
                                         const std::string& name) {
  return Call("get", "GET", r.Path(ns, name), "", "");
}

absl::StatusOr<ListResult> HttpKubeClient::List(const Resource& r, const std::string& ns,
                                                const std::string& label_selector) {
  std::string path = r.Path(ns);
  if (!label_selector.empty()) absl::StrAppend(&path, "?labelSelector=", Encode(label_selector));
  auto j = Call("list", "GET", path, "", "");
  if (!j.ok()) return j.status();
  FillKinds(*j);
  ListResult out;
  out.resource_version = j->value("metadata", Json::object()).value("resourceVersion", "");
  for (Json& item : (*j)["items"]) out.items.push_back(std::move(item));
  return out;
}

absl::Status HttpKubeClient::Watch(const WatchRequest& req,
                                   const std::function<bool(const WatchEvent&)>& on_event) {
  std::string path = absl::StrCat(req.resource.Path(req.ns),
                                  "?watch=1&timeoutSeconds=", absl::ToInt64Seconds(req.timeout));
  if (req.bookmarks) absl::StrAppend(&path, "&allowWatchBookmarks=true");
  if (!req.resource_version.empty()) {
    absl::StrAppend(&path, "&resourceVersion=", Encode(req.resource_version));
  }
  if (!req.label_selector.empty()) {
    absl::StrAppend(&path, "&labelSelector=", Encode(req.label_selector));
  }
  // No byte for this long means a dead connection (the server sends bookmarks meanwhile).
  auto cli = Connect(req.timeout + absl::Seconds(60));
  if (!cli.ok()) return cli.status();
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("watches cancelled");
    watches_.insert(cli->get());
  }
  int http_status = 0;
  std::string buffer, error_body;
  absl::Status result = absl::OkStatus();
  bool stopped = false;
  const std::string kind_default = req.resource.plural;
  auto receive = [&](const char* data, size_t len) {
    if (http_status != 200) {
      error_body.append(data, len);
      return true;
    }
    buffer.append(data, len);
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      Json j;
      try {
        j = Json::parse(line);
      } catch (const Json::exception& e) {
        result = absl::InternalError(absl::StrCat("watch ", path, ": bad event: ", e.what()));
        return false;
      }
      const std::string type = j.value("type", "");
      WatchEvent ev;
      ev.object = j.value("object", Json::object());
      if (type == "ADDED") {
        ev.type = WatchEvent::Type::kAdded;
      } else if (type == "MODIFIED") {
        ev.type = WatchEvent::Type::kModified;
      } else if (type == "DELETED") {
        ev.type = WatchEvent::Type::kDeleted;
      } else if (type == "BOOKMARK") {
        ev.type = WatchEvent::Type::kBookmark;
      } else {  // ERROR: a Status object
        result = StatusFromHttp(ev.object.value("code", 500), ev.object.dump());
        return false;
      }
      if (!on_event(ev)) {
        stopped = true;
        result = absl::CancelledError("watch stopped by its consumer");
        return false;
      }
    }
    return true;
  };
  const absl::Time start = absl::Now();
  auto res = (*cli)->Get(
      path.c_str(), httplib::Headers{},
      [&](const httplib::Response& r) {
        http_status = r.status;
        return true;
      },
      receive);
  bool cancelled;
  {
    absl::MutexLock lock(&mu_);
    watches_.erase(cli->get());
    cancelled = cancelled_;
  }
  metrics_->Count("watch", http_status, absl::Now() - start);
  if (!result.ok()) return result;
  if (http_status != 0 && http_status != 200) {
    return StatusFromHttp(http_status, error_body);
  }
  if (!res) {
    if (cancelled || stopped) return absl::CancelledError("watch cancelled");
    return absl::UnavailableError(
        absl::StrCat("watch ", path, ": ", httplib::to_string(res.error())));
  }
  return absl::OkStatus();
}

void HttpKubeClient::CancelWatches() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (httplib::ClientImpl* c : watches_) c->stop();
}

absl::StatusOr<Json> HttpKubeClient::Create(const Resource& r, const std::string& ns,
                                            const Json& object) {
  return Call("create", "POST", r.Path(ns), object.dump(), "application/json");
}

absl::StatusOr<Json> HttpKubeClient::Update(const Resource& r, const std::string& ns,
                                            const Json& object, const std::string& subresource) {
  const std::string name = object.value("metadata", Json::object()).value("name", "");
  return Call("update", "PUT", r.Path(ns, name, subresource), object.dump(), "application/json");
}

absl::StatusOr<Json> HttpKubeClient::Apply(const Resource& r, const std::string& ns,
                                           const Json& object, const ApplyOptions& options) {
  const std::string name = object.value("metadata", Json::object()).value("name", "");
  const std::string path = absl::StrCat(r.Path(ns, name, options.subresource),
                                        "?fieldManager=", Encode(options.field_manager),
                                        options.force ? "&force=true" : "");
  // JSON is YAML: the apply patch type takes it as is.
  return Call(options.subresource.empty() ? "apply" : "apply_status", "PATCH", path, object.dump(),
              "application/apply-patch+yaml");
}

absl::Status HttpKubeClient::Delete(const Resource& r, const std::string& ns,
                                    const std::string& name) {
  return Call("delete", "DELETE", r.Path(ns, name), "", "").status();
}

}  // namespace moe::op::kube
