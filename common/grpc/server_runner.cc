#include "common/grpc/server_runner.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/base/log.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"

namespace moe::common::rpc {

ServerRunner::ServerRunner(ServerOptions options) : options_(std::move(options)) {}

ServerRunner::~ServerRunner() {
  bool running;
  {
    absl::MutexLock lock(&mu_);
    running = state_ == State::kRunning || state_ == State::kDraining;
  }
  if (running) Shutdown();
}

void ServerRunner::AddService(::grpc::Service* service, std::string full_name) {
  services_.emplace_back(service, std::move(full_name));
}

absl::Status ServerRunner::Start() {
  {
    absl::MutexLock lock(&mu_);
    if (state_ != State::kNew) return absl::FailedPreconditionError("ServerRunner started twice");
  }
  if (absl::Status s = options_.Validate(); !s.ok()) return s;
  absl::StatusOr<std::shared_ptr<::grpc::ServerCredentials>> creds =
      MakeServerCredentials(options_.tls);
  if (!creds.ok()) return creds.status();
  if (services_.empty()) return absl::FailedPreconditionError("grpc: no service registered");

  // Process-wide switch, read by every ServerBuilder built after it.
  ::grpc::EnableDefaultHealthCheckService(true);
  ::grpc::ServerBuilder builder;
  // gRPC sets SO_REUSEPORT by default, which lets a second server bind the same port and take a
  // share of the calls; a port conflict must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Our clients ping while their calls are open (ChannelOptions::keepalive_time, down to 500 ms)
  // to find black-holed peers; gRPC's server default answers pings more often than every 5 min
  // without data with a GOAWAY (too_many_pings), which would fail a long prefill's stream.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 400);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  const std::string address = absl::StrContains(options_.host, ':')
                                  ? absl::StrCat("[", options_.host, "]:", options_.port)
                                  : absl::StrCat(options_.host, ":", options_.port);
  int selected_port = 0;
  builder.AddListeningPort(address, *creds, &selected_port);
  for (auto& [service, name] : services_) builder.RegisterService(service);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || selected_port == 0) {
    server_.reset();
    return absl::UnavailableError(absl::StrCat("grpc: cannot listen on ", address, " (in use?)"));
  }
  port_ = selected_port;
  // The default health service starts SERVING; readiness is the service's call.
  ::grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", false);
  for (const auto& [service, name] : services_) {
    if (!name.empty()) health->SetServingStatus(name, false);
  }
  absl::MutexLock lock(&mu_);
  state_ = State::kRunning;
  return absl::OkStatus();
}

void ServerRunner::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (state_ != State::kRunning) return;
  // Applies to "" and every service name set at Start.
  server_->GetHealthCheckService()->SetServingStatus(serving);
}

void ServerRunner::Shutdown() { Shutdown(absl::Now() + options_.drain_timeout); }

void ServerRunner::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (state_ == State::kNew) {
      state_ = State::kStopped;
      return;
    }
    if (state_ != State::kRunning) {
      mu_.Await(absl::Condition(
          +[](State* s) { return *s == State::kStopped; }, &state_));
      return;
    }
    state_ = State::kDraining;
    server_->GetHealthCheckService()->SetServingStatus(false);
  }
  MOE_LOG_INFO("grpc: draining port {} (up to {})", port_,
               absl::FormatDuration(std::max(deadline - absl::Now(), absl::ZeroDuration())));
  server_->Shutdown(absl::ToChronoTime(deadline));
  server_->Wait();
  absl::MutexLock lock(&mu_);
  state_ = State::kStopped;
}

void ServerRunner::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](State* s) { return *s == State::kStopped; }, &state_));
}

}  // namespace moe::common::rpc
