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
#include "common/grpc/options.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace moe::common::rpc {

// Insecure credentials when TLS is off. kInvalidArgument for invalid options, kNotFound when a
// file cannot be read.
absl::StatusOr<std::shared_ptr<::grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTlsOptions& options);
absl::StatusOr<std::shared_ptr<::grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsOptions& options);

}  // namespace moe::common::rpc
