#include "common/grpc/tls.h"

#include "absl/strings/str_cat.h"
#include "common/base/file.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "grpcpp/security/tls_credentials_options.h"

namespace moe::common::rpc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& key, const std::string& path) {
  absl::StatusOr<std::string> text = common::ReadFile(path);
  if (!text.ok()) return absl::NotFoundError(absl::StrCat(key, ": cannot read \"", path, "\""));
  if (text->find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": \"", path, "\" is not a PEM file"));
  }
  return text;
}

}  // namespace

absl::StatusOr<std::shared_ptr<::grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) return ::grpc::InsecureServerCredentials();
  // Checked here so that a wrong path fails at startup with the key's name; gRPC's watcher
  // only logs.
  if (auto s = ReadPem("cert_file", options.cert_file); !s.ok()) return s.status();
  if (auto s = ReadPem("key_file", options.key_file); !s.ok()) return s.status();
  if (!options.client_ca_file.empty()) {
    if (auto s = ReadPem("client_ca_file", options.client_ca_file); !s.ok()) return s.status();
  }
  const auto interval = static_cast<unsigned>(absl::ToInt64Seconds(options.reload_interval));
  auto provider = std::make_shared<::grpc::experimental::FileWatcherCertificateProvider>(
      options.key_file, options.cert_file, options.client_ca_file, interval);
  ::grpc::experimental::TlsServerCredentialsOptions tls(provider);
  tls.watch_identity_key_cert_pairs();
  tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  if (!options.client_ca_file.empty()) {
    tls.watch_root_certs();
    tls.set_cert_request_type(options.require_client_cert
                                  ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                  : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  }
  return ::grpc::experimental::TlsServerCredentials(tls);
}

absl::StatusOr<std::shared_ptr<::grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled) return ::grpc::InsecureChannelCredentials();
  if (!options.ca_file.empty()) {
    if (auto s = ReadPem("ca_file", options.ca_file); !s.ok()) return s.status();
  }
  if (!options.cert_file.empty()) {
    if (auto s = ReadPem("cert_file", options.cert_file); !s.ok()) return s.status();
    if (auto s = ReadPem("key_file", options.key_file); !s.ok()) return s.status();
  }
  ::grpc::experimental::TlsChannelCredentialsOptions tls;
  if (!options.ca_file.empty() || !options.cert_file.empty()) {
    const auto interval = static_cast<unsigned>(absl::ToInt64Seconds(options.reload_interval));
    tls.set_certificate_provider(
        std::make_shared<::grpc::experimental::FileWatcherCertificateProvider>(
            options.key_file, options.cert_file, options.ca_file, interval));
    // Without a CA file the system roots verify the server.
    if (!options.ca_file.empty()) tls.watch_root_certs();
    if (!options.cert_file.empty()) tls.watch_identity_key_cert_pairs();
  }
  tls.set_verify_server_certs(true);
  return ::grpc::experimental::TlsCredentials(tls);
}

}  // namespace moe::common::rpc
