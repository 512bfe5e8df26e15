#include "common/grpc/tls.h"


#include "absl/strings/str_cat.h"
#include "common/base/file.h"

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

absl::Status CheckKeyPair(const std::string& cert_file, const std::string& key_file) {
  if (!cert_file.empty() && key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("key_file: \"\" is required with cert_file \"", cert_file, "\""));
  }
  if (cert_file.empty() && !key_file.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cert_file: \"\" is required with key_file \"", key_file, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

void ServerTlsOptions::Describe(config::Schema<ServerTlsOptions>& s) {
  s.Add("cert_file", &ServerTlsOptions::cert_file, "PEM server certificate; empty = plaintext");
  s.Add("key_file", &ServerTlsOptions::key_file, "PEM private key of cert_file");
  s.Add("client_ca_file", &ServerTlsOptions::client_ca_file, "PEM CA of client certificates");
  s.Add("require_client_cert", &ServerTlsOptions::require_client_cert, "mTLS");
}

absl::Status ServerTlsOptions::Validate() const {
  if (absl::Status s = CheckKeyPair(cert_file, key_file); !s.ok()) return s;
  if (!enabled() && !client_ca_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("client_ca_file: \"", client_ca_file,
                                                   "\" needs TLS (set cert_file and key_file)"));
  }
  if (require_client_cert && client_ca_file.empty()) {
    return absl::InvalidArgumentError("require_client_cert: true needs client_ca_file");
  }
  return absl::OkStatus();
}

void ClientTlsOptions::Describe(config::Schema<ClientTlsOptions>& s) {
  s.Add("enabled", &ClientTlsOptions::enabled, "use TLS");
  s.Add("ca_file", &ClientTlsOptions::ca_file, "PEM roots of the server; empty = system");
  s.Add("cert_file", &ClientTlsOptions::cert_file, "PEM client certificate (mTLS)");
  s.Add("key_file", &ClientTlsOptions::key_file, "PEM private key of cert_file");
  s.Add("server_name_override", &ClientTlsOptions::server_name_override,
        "name to verify in the server certificate");
}

absl::Status ClientTlsOptions::Validate() const {
  if (absl::Status s = CheckKeyPair(cert_file, key_file); !s.ok()) return s;
  if (!enabled && (!ca_file.empty() || !cert_file.empty() || !server_name_override.empty())) {
    return absl::InvalidArgumentError("enabled: false, but TLS files or names are set");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<::grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled()) return ::grpc::InsecureServerCredentials();
  absl::StatusOr<std::string> cert = ReadPem("cert_file", options.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem("key_file", options.key_file);
  if (!key.ok()) return key.status();
  ::grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({*key, *cert});
  ssl.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  if (!options.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("client_ca_file", options.client_ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
    ssl.client_certificate_request =
        options.require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                                    : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return ::grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<::grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (!options.enabled) return ::grpc::InsecureChannelCredentials();
  ::grpc::SslCredentialsOptions ssl;
  if (!options.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem("ca_file", options.ca_file);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *ca;
  }
  if (!options.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem("cert_file", options.cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem("key_file", options.key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *cert;
    ssl.pem_private_key = *key;
  }
  return ::grpc::SslCredentials(ssl);
}

}  // namespace moe::common::rpc
