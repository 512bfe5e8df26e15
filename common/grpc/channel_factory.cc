#include "common/grpc/channel_factory.h"

#include "common/grpc/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"

namespace moe::common::rpc {

absl::StatusOr<std::shared_ptr<::grpc::Channel>> CreateChannel(const std::string& target,
                                                               const ChannelOptions& options) {
  if (target.empty()) return absl::InvalidArgumentError("target: must not be empty");
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<::grpc::ChannelCredentials>> creds =
      MakeChannelCredentials(options.tls);
  if (!creds.ok()) return creds.status();
  ::grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(options.max_message_bytes);
  const int initial_ms =
      static_cast<int>(absl::ToInt64Milliseconds(options.initial_reconnect_backoff));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, initial_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
  if (!options.tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.tls.server_name_override);
  }
  return ::grpc::CreateCustomChannel(target, *creds, args);
}

absl::StatusOr<bool> CheckServing(::grpc::Channel& channel, const std::string& service,
                                  absl::Duration timeout) {
  // The stub needs a shared_ptr; this one does not own the caller's channel.
  std::shared_ptr<::grpc::Channel> borrowed(std::shared_ptr<::grpc::Channel>(), &channel);
  auto stub = ::grpc::health::v1::Health::NewStub(borrowed);
  ::grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  ::grpc::health::v1::HealthCheckRequest req;
  req.set_service(service);
  ::grpc::health::v1::HealthCheckResponse res;
  ::grpc::Status status = stub->Check(&ctx, req, &res);
  if (!status.ok()) return FromGrpcStatus(status);
  return res.status() == ::grpc::health::v1::HealthCheckResponse::SERVING;
}

}  // namespace moe::common::rpc
