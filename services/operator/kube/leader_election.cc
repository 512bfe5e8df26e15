#include "services/operator/kube/leader_election.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/log.h"

namespace moe::op::kube {

const Resource& LeaseResource() {
  static const Resource r{"coordination.k8s.io/v1", "leases", true};
  return r;
}

absl::Status LeaderElectionOptions::Validate() const {
  if (name.empty() || identity.empty() || ns.empty()) {
    return absl::InvalidArgumentError("leader election needs a namespace, a name and an identity");
  }
  if (!(retry_period < renew_deadline && renew_deadline < lease_duration)) {
    return absl::InvalidArgumentError(
        "leader election: retry_period < renew_deadline < lease_duration");
  }
  return absl::OkStatus();
}

struct LeaderElector::Metrics {
  explicit Metrics(common::metrics::Registry& r)
      : leader(r.AddGauge("moe_operator_leader", "1 while this replica leads (holds the Lease).")),
        transitions(r.AddCounter("moe_operator_leader_transitions_total",
                                 "Times this replica started or stopped leading.")) {}
  common::metrics::Gauge& leader;
  common::metrics::Counter& transitions;
};

LeaderElector::LeaderElector(LeaderElectionOptions options, KubeClient& client,
                             common::Clock& clock, common::metrics::Registry& registry,
                             std::function<void()> on_started, std::function<void()> on_stopped)
    : options_(std::move(options)),
      client_(client),
      clock_(clock),
      metrics_(std::make_unique<Metrics>(registry)),
      on_started_(std::move(on_started)),
      on_stopped_(std::move(on_stopped)) {}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void LeaderElector::SetLeading(bool leading) {
  if (leading_.exchange(leading) == leading) return;
  metrics_->leader.Set(leading ? 1 : 0);
  metrics_->transitions.Increment();
  MOE_LOG_INFO("operator: {} {} leading (lease {}/{})", options_.identity,
               leading ? "started" : "stopped", options_.ns, options_.name);
  if (leading && on_started_) on_started_();
  if (!leading && on_stopped_) on_stopped_();
}

namespace {
// MicroTime, as the Lease's acquireTime/renewTime.
std::string MicroTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", t, absl::UTCTimeZone());
}
}  // namespace

bool LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = clock_.Now();
  const int lease_seconds =
      static_cast<int>(std::max<int64_t>(1, absl::ToInt64Seconds(options_.lease_duration)));
  auto lease = client_.Get(LeaseResource(), options_.ns, options_.name);
  if (!lease.ok() && lease.status().code() == absl::StatusCode::kNotFound) {
    Json fresh = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", options_.name}, {"namespace", options_.ns}}},
                  {"spec",
                   {{"holderIdentity", options_.identity},
                    {"leaseDurationSeconds", lease_seconds},
                    {"acquireTime", MicroTime(now)},
                    {"renewTime", MicroTime(now)},
                    {"leaseTransitions", 0}}}};
    auto created = client_.Create(LeaseResource(), options_.ns, fresh);
    held_by_other_ = false;
    if (!created.ok()) return false;  // someone else created it first (409) or the API failed
    last_renew_ = now;
    return true;
  }
  if (!lease.ok()) return false;
  Json spec = lease->value("spec", Json::object());
  const std::string holder = spec.value("holderIdentity", "");
  const std::string record = holder + "|" + spec.value("renewTime", "");
  if (record != observed_record_) {
    observed_record_ = record;
    observed_at_ = now;
  }
  const absl::Duration their_duration =
      absl::Seconds(spec.value("leaseDurationSeconds", lease_seconds));
  const bool mine = holder == options_.identity;
  held_by_other_ = !mine && !holder.empty();
  if (held_by_other_ && now < observed_at_ + their_duration) return false;
  Json updated = *lease;
  if (!mine) {
    updated["spec"]["acquireTime"] = MicroTime(now);
    updated["spec"]["leaseTransitions"] = spec.value("leaseTransitions", 0) + 1;
  }
  updated["spec"]["holderIdentity"] = options_.identity;
  updated["spec"]["leaseDurationSeconds"] = lease_seconds;
  updated["spec"]["renewTime"] = MicroTime(now);
  // metadata.resourceVersion stays: the update fails (409) if anyone wrote the Lease since.
  auto put = client_.Update(LeaseResource(), options_.ns, updated);
  if (!put.ok()) return false;
  const Json s = put->value("spec", Json::object());
  observed_record_ = options_.identity + "|" + s.value("renewTime", "");
  observed_at_ = now;
  last_renew_ = now;
  return true;
}

void LeaderElector::Run() {
  while (!stop_) {
    const bool held = TryAcquireOrRenew();
    if (held) {
      SetLeading(true);
    } else if (leading_ &&
               (held_by_other_ || clock_.Now() - last_renew_ >= options_.renew_deadline)) {
      // Another holder is proof of a lost lease; otherwise stop once renewing failed for the
      // renew deadline, which ends before anyone else may take the Lease (lease_duration).
      SetLeading(false);
    }
    const absl::Time until = clock_.Now() + options_.retry_period;
    while (!stop_ && clock_.Now() < until) {
      clock_.SleepFor(std::min(absl::Milliseconds(20), until - clock_.Now()));
    }
  }
  if (leading_) {
    // Release: an empty holder lets a candidate take over at its next try.
    if (auto lease = client_.Get(LeaseResource(), options_.ns, options_.name);
        lease.ok() &&
        lease->value("spec", Json::object()).value("holderIdentity", "") == options_.identity) {
      Json released = *lease;
      released["spec"]["holderIdentity"] = "";
      released["spec"]["leaseDurationSeconds"] = 1;
      (void)client_.Update(LeaseResource(), options_.ns, released);
    }
    SetLeading(false);
  }
}

}  // namespace moe::op::kube
