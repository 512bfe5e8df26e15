#include "tests/testonly/echo_service.h"

#include "absl/strings/str_cat.h"

namespace moe::testonly {

void EchoServiceOptions::Describe(common::config::Schema<EchoServiceOptions>& s) {
  s.Section("grpc", &EchoServiceOptions::grpc);
  s.Section("metrics", &EchoServiceOptions::metrics);
  s.Add("prefix", &EchoServiceOptions::prefix, "prepended to every reply");
  s.Add("max_message_bytes", &EchoServiceOptions::max_message_bytes).Range(1, 1 << 20);
  s.Add("max_delay", &EchoServiceOptions::max_delay).Range(absl::ZeroDuration(), absl::Minutes(1));
  s.Add("log_level", &EchoServiceOptions::log_level).NonEmpty();
}

EchoMetrics::EchoMetrics(common::metrics::Registry& registry)
    : requests_total(
          registry.AddCounter("moe_testonly_echo_requests_total", "Echo calls answered OK.")),
      rejected_total(registry.AddCounter("moe_testonly_echo_rejected_total",
                                         "Echo calls refused with INVALID_ARGUMENT.")),
      in_flight(registry.AddGauge("moe_testonly_echo_in_flight", "Echo calls being handled.")) {}

::grpc::Status EchoService::Echo(::grpc::ServerContext* context, const v1::EchoRequest* request,
                                 v1::EchoResponse* response) {
  if (static_cast<int>(request->message().size()) > options_.max_message_bytes ||
      absl::Milliseconds(request->delay_ms()) > options_.max_delay) {
    metrics_.rejected_total.Increment();
    return ::grpc::Status(
        ::grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("message over ", options_.max_message_bytes, " bytes or delay over ",
                     absl::FormatDuration(options_.max_delay)));
  }
  metrics_.in_flight.Increment();
  // The delay stands for real work, so that a drain has something in flight to wait for.
  const absl::Time until = absl::Now() + absl::Milliseconds(request->delay_ms());
  while (absl::Now() < until && !context->IsCancelled()) {
    absl::SleepFor(std::min(until - absl::Now(), absl::Milliseconds(5)));
  }
  metrics_.in_flight.Decrement();
  if (context->IsCancelled()) return ::grpc::Status::CANCELLED;
  response->set_message(options_.prefix + request->message());
  metrics_.requests_total.Increment();
  return ::grpc::Status::OK;
}

}  // namespace moe::testonly
