#include "common/grpc/channel_factory.h"

#include <sys/stat.h>

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/base/file.h"
#include "common/grpc/auth.h"
#include "common/grpc/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"

namespace moe::common::rpc {
namespace {

// The token of a file, re-read when its mtime or size changes (checked at most once a second).
class TokenSource {
 public:
  explicit TokenSource(std::string path) : path_(std::move(path)) {}

  absl::Status Load() {
    absl::MutexLock lock(&mu_);
    return ReloadLocked(absl::Now());
  }

  std::string Value() {
    absl::MutexLock lock(&mu_);
    const absl::Time now = absl::Now();
    if (now >= next_check_) ReloadLocked(now).IgnoreError();  // keeps the last good token
    return value_;
  }

 private:
  absl::Status ReloadLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    next_check_ = now + absl::Seconds(1);
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0) {
      return absl::NotFoundError(absl::StrCat("token_file: cannot read \"", path_, "\""));
    }
    const int64_t stamp = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                          st.st_mtim.tv_nsec + static_cast<int64_t>(st.st_size);
    if (stamp == stamp_ && !value_.empty()) return absl::OkStatus();
    absl::StatusOr<std::string> text = ReadFile(path_);
    if (!text.ok())
      return absl::NotFoundError(absl::StrCat("token_file: cannot read \"", path_, "\""));
    absl::string_view token = absl::StripAsciiWhitespace(*text);
    if (token.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("token_file: \"", path_, "\" is empty"));
    }
    value_ = BearerValue(std::string_view(token.data(), token.size()));
    stamp_ = stamp;
    return absl::OkStatus();
  }

  const std::string path_;
  absl::Mutex mu_;
  std::string value_ ABSL_GUARDED_BY(mu_);
  int64_t stamp_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Time next_check_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

class TokenInterceptor final : public ::grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(TokenSource& source) : source_(source) {}
  void Intercept(::grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            ::grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace(std::string(kAuthorizationMetadata),
                                                 source_.Value());
    }
    methods->Proceed();
  }

 private:
  TokenSource& source_;
};

class TokenInterceptorFactory final
    : public ::grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(std::shared_ptr<TokenSource> source)
      : source_(std::move(source)) {}
  ::grpc::experimental::Interceptor* CreateClientInterceptor(
      ::grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(*source_);
  }

 private:
  std::shared_ptr<TokenSource> source_;
};

}  // namespace

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
  // gRPC's minimum reconnect backoff is its minimum connect timeout (an attempt is given
  // max(the backoff, this)), not a floor of the backoff: options.h connect_timeout.
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.connect_timeout)));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff)));
  // Keepalive while calls are open (options.h): pings without limit on how many go without data
  // (a long server stream sends the client's side no data), none while the channel is idle.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_time)));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
              static_cast<int>(absl::ToInt64Milliseconds(options.keepalive_timeout)));
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  if (options.stream_window_bytes > 0) {
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, options.stream_window_bytes);
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  }
  if (!options.tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options.tls.server_name_override);
  }
  if (options.token_file.empty()) return ::grpc::CreateCustomChannel(target, *creds, args);
  auto source = std::make_shared<TokenSource>(options.token_file);
  if (absl::Status s = source->Load(); !s.ok()) return s;
  std::vector<std::unique_ptr<::grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<TokenInterceptorFactory>(std::move(source)));
  return ::grpc::experimental::CreateCustomChannelWithInterceptors(target, *creds, args,
                                                                   std::move(factories));
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
