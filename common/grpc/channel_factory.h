// Client channels (insecure or TLS) and a grpc.health.v1 probe, for services calling services
// and for tests and launchers.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grpc/tls.h"
#include "grpcpp/channel.h"

namespace moe::common::rpc {

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
  // A file holding a bearer token sent with every call (`authorization` metadata), for servers
  // whose auth grants roles by token (common/grpc/auth.h). Re-read when it changes on disk.
  // Empty = none (under mTLS the client certificate names the caller).
  std::string token_file;

  static void Describe(config::Schema<ChannelOptions>& s) {
    s.Section("tls", &ChannelOptions::tls);
    s.Add("token_file", &ChannelOptions::token_file, "bearer token sent with every call");
    s.Add("max_message_bytes", &ChannelOptions::max_message_bytes).Range(1 << 16, 1 << 30);
    s.Add("initial_reconnect_backoff", &ChannelOptions::initial_reconnect_backoff)
        .Range(absl::Milliseconds(10), absl::Minutes(2));
    s.Add("max_reconnect_backoff", &ChannelOptions::max_reconnect_backoff)
        .Range(absl::Milliseconds(10), absl::Minutes(2));
  }
  absl::Status Validate() const { return config::CheckFields(*this); }
};

// A channel to `target` ("host:port" or a gRPC target URI). Connects lazily: errors reaching the
// peer surface on the first call. kInvalidArgument / kNotFound for bad options or TLS files.
absl::StatusOr<std::shared_ptr<::grpc::Channel>> CreateChannel(const std::string& target,
                                                               const ChannelOptions& options = {});

// Asks the peer's grpc.health.v1 service about `service` ("" = the whole server). Returns true
// for SERVING, false for NOT_SERVING; kNotFound for a service the peer does not know; the
// call's error (kUnavailable, kDeadlineExceeded...) when the peer cannot answer in `timeout`.
absl::StatusOr<bool> CheckServing(::grpc::Channel& channel, const std::string& service = "",
                                  absl::Duration timeout = absl::Seconds(1));

}  // namespace moe::common::rpc
