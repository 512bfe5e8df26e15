// Client channels (insecure or TLS) and a grpc.health.v1 probe, for services calling services
// and for tests and launchers.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/config/schema.h"
#include "common/grpc/options.h"
#include "common/grpc/tls.h"
#include "grpcpp/channel.h"

namespace moe::common::rpc {

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
