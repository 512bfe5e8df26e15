// TLS / mTLS credentials from PEM files, for servers (ServerRunner) and clients (CreateChannel).
// Files are checked when credentials are made, so a missing or unreadable file fails at startup;
// afterwards gRPC re-reads them every reload_interval, so a certificate that cert-manager rotates
// on disk (key, chain or CA) is used by new connections without a restart. A file that is
// briefly half-written or missing keeps the last good credentials.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace moe::common::rpc {

// Server side. All empty: plaintext.
struct ServerTlsOptions {
  std::string cert_file;       // PEM certificate chain of this server; empty = plaintext.
  std::string key_file;        // PEM private key of cert_file. Required with cert_file.
  std::string client_ca_file;  // PEM CA bundle that signs client certificates (mTLS).
  // mTLS: reject clients without a certificate signed by client_ca_file. Without it, a client
  // certificate is verified when presented.
  bool require_client_cert = false;
  absl::Duration reload_interval = absl::Seconds(60);  // how often the files are re-read

  bool enabled() const { return !cert_file.empty(); }
  static void Describe(config::Schema<ServerTlsOptions>& s);
  // cert_file and key_file come together; client_ca_file and require_client_cert need TLS;
  // require_client_cert needs client_ca_file.
  absl::Status Validate() const;
};

// Client side.
struct ClientTlsOptions {
  bool enabled = false;   // Use TLS; false = plaintext (then the files must be empty).
  std::string ca_file;    // PEM roots that sign the server's certificate; empty = system.
  std::string cert_file;  // PEM client certificate chain, for mTLS; empty = none.
  std::string key_file;   // PEM private key of cert_file. Required with cert_file.
  // Name to verify in the server certificate instead of the target's host (e.g. "localhost"
  // when dialing 127.0.0.1 with a certificate issued to a DNS name); empty = the target host.
  std::string server_name_override;
  absl::Duration reload_interval = absl::Seconds(60);  // how often the files are re-read

  static void Describe(config::Schema<ClientTlsOptions>& s);
  absl::Status Validate() const;
};

// Insecure credentials when TLS is off. kInvalidArgument for invalid options, kNotFound when a
// file cannot be read.
absl::StatusOr<std::shared_ptr<::grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);
absl::StatusOr<std::shared_ptr<::grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options);

}  // namespace moe::common::rpc
