// `moe up`'s secure local cluster (the `security` section of up_options.h): the throwaway
// credentials one run uses, and the service flags that turn them on.
//
//   security: {mtls: true, auth: true}
//
// mtls: a CA and one certificate per service kind (its URI SAN spiffe://moe.local/<kind>, plus
// DNS:localhost and the bind address), every gRPC server with grpc.tls (require_client_cert) and
// every client (gateway -> routers, asr, tts; router -> expert workers, kv-store; moe up's own
// readiness probe and `moe admin` with admin.pem) dialing with its kind's certificate.
// auth: grpc.auth on every server, roles as SECURITY.md's table: under mtls by certificate
// identity (spiffe://moe.local/{gateway,router,admin}), otherwise (or with `tokens: true` as
// well) by one bearer token file per role that the clients send; and the gateway's API keys: a
// key file of digests (security.api_keys_file, or one key moe up makes, its plaintext in
// <dir>/api-key, mode 0600, for the user).
//
// Everything is made again in `dir` (default <data_dir>/security) on every start: certificates
// for 24 hours, tokens and the key from the kernel's random source. Private keys, tokens and
// the key file are readable by the owner only. Nothing secret is printed or logged: moe up's
// ready line names the files.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/grpc/options.h"
#include "tools/moe/up_options.h"

namespace moe::cli {

// The credentials of one secure run (all paths absolute; empty when not used).
struct ClusterSecurity {
  SecurityOptions options;
  std::string host;  // the bind address the certificates name
  std::string dir;
  std::string ca_file;  // the CA that signs every server and client certificate
  // Certificate and key of a service kind ("router", "expert_worker", ...) or "admin".
  std::string CertFile(const std::string& kind) const { return dir + "/" + kind + ".pem"; }
  std::string KeyFile(const std::string& kind) const { return dir + "/" + kind + ".key"; }
  // A role's bearer token file ("gateway", "router", "admin"); used when options.UseTokens().
  std::string TokenFile(const std::string& role) const { return dir + "/" + role + ".token"; }
  std::string api_keys_file;  // the gateway's key file (digests)
  std::string api_key_file;   // the plaintext key moe up made ("" with options.api_keys_file)

  bool enabled() const { return options.mtls || options.auth; }

  // `--set` flags of a gRPC server of `kind`: grpc.tls.* and grpc.auth.* (none when off).
  std::vector<std::string> ServerFlags(const std::string& kind) const;
  // `--set` flags of the client channel `section` ("routing.channel") of a process of `kind`,
  // whose role is `role` ("gateway", "router"): its tls.* and token_file.
  std::vector<std::string> ChannelFlags(const std::string& section, const std::string& kind,
                                        const std::string& role) const;
  // The channel of a client holding the admin role (moe up's readiness probe, moe admin).
  common::rpc::ChannelOptions AdminChannel() const;
};

// The SPIFFE id of a service kind's certificate, the identity auth grants a role to.
std::string SpiffeId(const std::string& kind);

// The service kinds that get a certificate: every gRPC server and client of the topology.
const std::vector<std::string>& CertifiedKinds();

// Makes `dir` afresh (its old files removed) with the credentials `options` asks for.
// Errors: kInvalidArgument for a bad api_keys_file, kInternal for a file or OpenSSL failure.
absl::StatusOr<ClusterSecurity> MakeClusterSecurity(const SecurityOptions& options,
                                                    const std::string& dir,
                                                    const std::string& host);

}  // namespace moe::cli
