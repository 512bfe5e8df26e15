#include "services/router/core/recalibration_coordinator.h"

#include <algorithm>
#include <utility>

#include "services/router/core/placement_algorithm.h"

namespace moe::router {

const char* CoordinatorActionName(CoordinatorAction action) {
  switch (action) {
    case CoordinatorAction::kFailed:
      return "failed";
    case CoordinatorAction::kIdle:
      return "idle";
    case CoordinatorAction::kCooldown:
      return "cooldown";
    case CoordinatorAction::kBalanced:
      return "balanced";
    case CoordinatorAction::kLow:
      return "low";
    case CoordinatorAction::kSkipped:
      return "skipped";
    case CoordinatorAction::kDryRun:
      return "dry_run";
    case CoordinatorAction::kRecalibrated:
      return "recalibrated";
  }
  return "unknown";
}

struct RecalibrationCoordinator::Metrics {
  explicit Metrics(common::metrics::Registry& r)
      : checks(r.CounterFamily("moe_coordinator_checks_total",
                               "Recalibration coordinator checks, by decision.")),
        recalibrations(r.CounterFamily("moe_coordinator_recalibrations_total",
                                       "Recalibrations the coordinator decided on, by result (ok, "
                                       "failed, skipped, dry_run).")),
        min_balancedness(r.AddGauge(
            "moe_coordinator_min_balancedness",
            "Min over MoE layers of the balancedness judged at the last check (measured: mean/max "
            "worker tokens; expected when workers report none).")),
        low_checks(r.AddGauge("moe_coordinator_low_checks",
                              "Consecutive checks below the threshold so far.")) {}
  common::metrics::Family<common::metrics::Counter>& checks;          // {decision}
  common::metrics::Family<common::metrics::Counter>& recalibrations;  // {result}
  common::metrics::Gauge& min_balancedness;
  common::metrics::Gauge& low_checks;
};

RecalibrationCoordinator::RecalibrationCoordinator(const RecalibrationCoordinatorOptions& options,
                                                   RecalibrationTransport& transport,
                                                   common::Clock& clock,
                                                   common::metrics::Registry& registry)
    : options_(options),
      transport_(transport),
      clock_(clock),
      metrics_(std::make_unique<Metrics>(registry)),
      next_check_(clock.Now()) {}

RecalibrationCoordinator::~RecalibrationCoordinator() = default;

std::optional<CoordinatorDecision> RecalibrationCoordinator::Tick() {
  const absl::Time now = clock_.Now();
  if (now < next_check_) return std::nullopt;
  CoordinatorDecision d = Check();
  // Scheduled from the check's start, so a slow protocol run does not drift the period, but
  // never in the past (a check longer than the interval is followed by one right away, once).
  next_check_ = std::max(now + options_.interval, clock_.Now());
  return d;
}

CoordinatorDecision RecalibrationCoordinator::Finish(CoordinatorDecision d,
                                                     const char* recalibration_result) {
  d.low_checks = low_checks_;
  metrics_->checks.Add({{"decision", CoordinatorActionName(d.action)}}).Increment();
  metrics_->low_checks.Set(low_checks_);
  if (!d.balancedness.empty()) metrics_->min_balancedness.Set(d.min_balancedness);
  if (recalibration_result != nullptr) {
    metrics_->recalibrations.Add({{"result", recalibration_result}}).Increment();
  }
  return d;
}

CoordinatorDecision RecalibrationCoordinator::Check() {
  CoordinatorDecision d;
  d.time = clock_.Now();
  // `acting`: the failure is the recalibration's (counted in recalibrations_total).
  auto failed = [&](absl::Status s, bool acting) {
    d.action = CoordinatorAction::kFailed;
    d.status = std::move(s);
    return Finish(std::move(d), acting ? "failed" : nullptr);
  };

  std::vector<RouterLoadReport> reports;
  for (int i = 0; i < transport_.num_routers(); ++i) {
    auto r = transport_.GetStats(i, options_.window);
    if (!r.ok()) return failed(r.status(), false);
    reports.push_back(*std::move(r));
  }
  if (!options_.dry_run) {
    // A recalibration interrupted in its switch step (this loop's or an operator's) is finished
    // first, so that the routers agree again.
    auto converged = CompleteInterruptedSwitch(transport_, reports);
    if (!converged.ok()) return failed(converged.status(), true);
    d.routers_converged = *converged;
  }
  auto load = AggregateLoad(reports);
  if (!load.ok()) return failed(load.status(), false);
  d.placement_version = load->placement.version;
  d.window_tokens = load->window_tokens;
  d.measured = HasWorkerTokens(load->worker_tokens);
  d.balancedness = d.measured ? MeasuredBalancedness(load->placement, load->worker_tokens)
                              : ExpectedBalancedness(load->placement, load->expert_tokens);
  d.min_balancedness = MinOverMoeLayers(load->placement, d.balancedness);

  if (load->window_tokens < static_cast<uint64_t>(options_.min_tokens)) {
    low_checks_ = 0;
    d.action = CoordinatorAction::kIdle;
    return Finish(std::move(d), nullptr);
  }
  if (cooldown_until_.has_value() && d.time < *cooldown_until_) {
    low_checks_ = 0;
    d.action = CoordinatorAction::kCooldown;
    return Finish(std::move(d), nullptr);
  }
  if (d.min_balancedness >= options_.threshold) {
    low_checks_ = 0;
    d.action = CoordinatorAction::kBalanced;
    return Finish(std::move(d), nullptr);
  }
  ++low_checks_;
  if (low_checks_ < options_.sustain) {
    d.action = CoordinatorAction::kLow;
    return Finish(std::move(d), nullptr);
  }

  auto plan = PlanRecalibration(*load, options_.slots_per_worker);
  if (!plan.ok()) return failed(plan.status(), true);
  const double before = MinOverMoeLayers(load->placement, plan->balancedness_before);
  const double after = MinOverMoeLayers(plan->placement, plan->balancedness_after);
  d.report = *std::move(plan);
  if (after - before < options_.min_improvement) {
    // Nothing better to switch to; judge a fresh streak before computing again.
    low_checks_ = 0;
    d.action = CoordinatorAction::kSkipped;
    return Finish(std::move(d), "skipped");
  }
  if (options_.dry_run) {
    // Reported as if acted, so a dry run shows the cadence a real run would have.
    low_checks_ = 0;
    cooldown_until_ = clock_.Now() + options_.cooldown;
    d.action = CoordinatorAction::kDryRun;
    return Finish(std::move(d), "dry_run");
  }
  if (absl::Status s = ApplyRecalibration(transport_, load->placement, d.report->placement);
      !s.ok()) {
    // The streak stays at `sustain`: the next check retries (after step 1 the extra replicas
    // stay loaded and unused; after a partial step 2 the routers disagree until a rerun).
    return failed(std::move(s), true);
  }
  low_checks_ = 0;
  cooldown_until_ = clock_.Now() + options_.cooldown;
  d.action = CoordinatorAction::kRecalibrated;
  return Finish(std::move(d), "ok");
}

}  // namespace moe::router
