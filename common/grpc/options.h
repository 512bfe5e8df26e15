// The options of gRPC servers and clients (TLS, auth, channels): plain structs with their config
// schemas and no gRPC headers, so that a core library's options can embed them without
// depending on gRPC (the gateway's core does).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/config/schema.h"

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

// The roles of the cluster: who calls what (SECURITY.md).
enum class Role : uint8_t {
  kGateway = 0,  // Router.Generate, asr, tts.
  kRouter = 1,   // ExpertWorker.RunExperts / NegotiateTransport, kv-store Put/Get/Lookup.
  kAdmin = 2,  // moe admin, the operator: placement, loading experts, anything that changes state.
};
inline constexpr int kNumRoles = 3;
std::string_view RoleName(Role role);

// Who holds one role.
struct RoleMembers {
  // Client-certificate SANs (DNS, URI, SPIFFE id), matched exactly. Needs mTLS.
  std::vector<std::string> identities;
  // Files that each hold one bearer token (surrounding whitespace ignored).
  std::vector<std::string> token_files;

  static void Describe(config::Schema<RoleMembers>& s);
};

struct AuthOptions {
  // false: every call is served (a local cluster on loopback). true: only callers holding a
  // method's role.
  bool enabled = false;
  RoleMembers gateway;
  RoleMembers router;
  RoleMembers admin;
  // How often a token file is checked for a change.
  absl::Duration token_reload_interval = absl::Seconds(5);

  const RoleMembers& members(Role r) const;
  static void Describe(config::Schema<AuthOptions>& s);
  // enabled needs at least one identity or token file; a token file must be readable and
  // non-empty (checked again by Authorizer::Create).
  absl::Status Validate() const;
};

struct ChannelOptions {
  ClientTlsOptions tls;
  // Largest message received or sent, bytes. RunExperts batches are the big ones:
  // 4096 tokens x hidden 4096 x 4 bytes = 64 MiB.
  int max_message_bytes = 64 << 20;
  // Reconnect backoff after a failed connection attempt: starts here, grows (x1.6, jittered) up
  // to the max. gRPC's defaults (1 s .. 120 s) suit the internet; inside a cluster a restarted
  // peer should be found again within seconds.
  absl::Duration initial_reconnect_backoff = absl::Milliseconds(100);
  absl::Duration max_reconnect_backoff = absl::Seconds(5);
  // The time one connection attempt (TCP connect, TLS handshake, the server's HTTP/2 SETTINGS)
  // is given before it counts as failed; a fail-fast call on a channel whose attempt failed
  // fails UNAVAILABLE. gRPC takes this from its minimum reconnect backoff, so it is set
  // apart from the backoff: a TLS handshake on a loaded node (a sanitizer build beside other
  // tests took over 100 ms) must not fail the first calls. A black-holed peer is found down
  // after this long.
  absl::Duration connect_timeout = absl::Seconds(5);
  // A file holding a bearer token sent with every call (`authorization` metadata), for servers
  // whose auth grants roles by token (common/grpc/auth.h). Re-read when it changes on disk.
  // Empty = none (under mTLS the client certificate names the caller).
  std::string token_file;
  // HTTP/2 keepalive: while a call is open the client pings every keepalive_time and closes the
  // connection when a ping is not answered within keepalive_timeout, so a peer whose link
  // accepts and never answers (a black-holed route, a frozen host) fails the call with
  // UNAVAILABLE instead of leaving it open forever. Servers (ServerRunner) accept such pings.
  absl::Duration keepalive_time = absl::Seconds(10);
  absl::Duration keepalive_timeout = absl::Seconds(5);
  // HTTP/2 flow control: the most a server stream sends ahead of the client's reads, bytes.
  // 0 = gRPC's default (64 KiB to start, grown by BDP probing to megabytes on a fast link, so a
  // client that stops reading a stream of small messages still receives thousands of them).
  // Set: this window for every stream and no BDP probing (the gateway's router channels, so
  // that pausing a stream's reads holds the router's sequence: services/gateway/README.md).
  int32_t stream_window_bytes = 0;

  static void Describe(config::Schema<ChannelOptions>& s) {
    s.Section("tls", &ChannelOptions::tls);
    s.Add("token_file", &ChannelOptions::token_file, "bearer token sent with every call");
    s.Add("max_message_bytes", &ChannelOptions::max_message_bytes).Range(1 << 16, 1 << 30);
    s.Add("initial_reconnect_backoff", &ChannelOptions::initial_reconnect_backoff)
        .Range(absl::Milliseconds(10), absl::Minutes(2));
    s.Add("max_reconnect_backoff", &ChannelOptions::max_reconnect_backoff)
        .Range(absl::Milliseconds(10), absl::Minutes(2));
    s.Add("connect_timeout", &ChannelOptions::connect_timeout,
          "time one connection attempt (TCP, TLS handshake, HTTP/2 SETTINGS) is given")
        .Range(absl::Milliseconds(100), absl::Minutes(2));
    s.Add("keepalive_time", &ChannelOptions::keepalive_time, "ping interval while a call is open")
        .Range(absl::Milliseconds(500), absl::Hours(2));
    s.Add("keepalive_timeout", &ChannelOptions::keepalive_timeout,
          "an unanswered ping closes the connection after this")
        .Range(absl::Milliseconds(100), absl::Minutes(10));
    s.Add("stream_window_bytes", &ChannelOptions::stream_window_bytes,
          "HTTP/2 window per stream (what a server stream sends ahead of the reads); "
          "0 = gRPC's default, grown by BDP probing")
        .Range(0, 1 << 30);
  }
  absl::Status Validate() const { return config::CheckFields(*this); }
};

}  // namespace moe::common::rpc
