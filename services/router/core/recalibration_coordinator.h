// The automatic recalibration loop (DESIGN.md §1 "when imbalance crosses a threshold"):
// every `interval` it gathers every router's load window (the RecalibrationTransport of
// recalibration.h), judges the cluster's balancedness, and runs the recalibration protocol when
// the balancedness has stayed below `threshold` for `sustain` consecutive checks.
//
// Judgement of one check, in order:
//   - the window holds fewer than `min_tokens` tokens: idle (an idle cluster never
//     recalibrates; the streak of low checks restarts);
//   - within `cooldown` of the last recalibration: cooldown (the window still holds traffic of
//     the old placement; the streak restarts);
//   - the minimum over MoE layers of the balancedness is >= threshold: balanced (streak restarts).
//     The balancedness is MEASURED (tokens each worker processed, mean / max over the
//     placement's workers) when the routers report worker tokens, else EXPECTED from the expert
//     tokens and the placement (placement_algorithm.h);
//   - otherwise low; on the `sustain`-th low check in a row the next placement is computed, and
//     it is skipped (no churn) unless it raises the expected minimum balancedness by at least
//     `min_improvement`; otherwise applied (or only reported with dry_run), then cooldown.
// A failed check (stats unreachable, routers disagreeing at the same version, a failed protocol
// step) is reported and keeps the streak, so the recalibration is retried at the next check,
// `interval` later. Routers left on different versions by an interrupted recalibration are first
// brought to the newest one (CompleteInterruptedSwitch; not in dry_run).
//
// The class has no thread: a driver calls Tick() (or Check()) and waits until next_check();
// `moe admin coordinate` waits for signals in between, tests advance a FakeClock.
//
// Metrics (DESIGN.md §5 naming): moe_coordinator_checks_total{decision},
// moe_coordinator_recalibrations_total{result} (ok | failed | skipped | dry_run),
// moe_coordinator_min_balancedness (last judged, min over MoE layers), moe_coordinator_low_checks
// (the current streak).
//
// Thread-safety: not thread-safe; one driver thread. Borrows the transport, clock and registry.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/config/schema.h"
#include "common/metrics/registry.h"
#include "services/router/core/recalibration.h"

namespace moe::router {

struct RecalibrationCoordinatorOptions {
  // Time between two checks (one GetStats per router each).
  absl::Duration interval = absl::Seconds(30);
  // Load window judged at each check and placed from: longer is steadier, shorter reacts sooner.
  absl::Duration window = absl::Seconds(60);
  // Recalibrate when the min over MoE layers of the balancedness stays below this, in (0, 1].
  double threshold = 0.8;
  // Consecutive low checks before acting: filters bursts (sustain * interval of imbalance).
  int sustain = 3;
  // Fewer tokens than this in the window (all routers, all layers, each top-k choice counted):
  // too little traffic to judge, so no action.
  int64_t min_tokens = 1000;
  // After a recalibration, checks do not act for this long; keep it >= window so that the next
  // judged window holds only traffic of the new placement.
  absl::Duration cooldown = absl::Minutes(5);
  // Expert slots per worker and layer of the new placement; 0 = the current most + 1.
  int slots_per_worker = 0;
  // A new placement must raise the expected min balancedness by this much, else it is skipped.
  double min_improvement = 0.02;
  // Decide and report only; never change the cluster.
  bool dry_run = false;

  static void Describe(common::config::Schema<RecalibrationCoordinatorOptions>& s) {
    using O = RecalibrationCoordinatorOptions;
    s.Add("interval", &O::interval, "time between checks")
        .Range(absl::Milliseconds(10), absl::Hours(24));
    s.Add("window", &O::window, "load window judged and placed from")
        .Range(absl::Seconds(1), absl::Hours(1));
    s.Add("threshold", &O::threshold, "act below this min balancedness").Range(0.0, 1.0);
    s.Add("sustain", &O::sustain, "consecutive low checks before acting").Range(1, 1000);
    s.Add("min_tokens", &O::min_tokens, "tokens in the window needed to judge")
        .Range(int64_t{0}, int64_t{1} << 50);
    s.Add("cooldown", &O::cooldown, "no action this long after a recalibration")
        .Range(absl::ZeroDuration(), absl::Hours(24));
    s.Add("slots_per_worker", &O::slots_per_worker, "expert slots per worker; 0 = current + 1")
        .Range(0, 1 << 16);
    s.Add("min_improvement", &O::min_improvement, "expected gain needed to act").Range(0.0, 1.0);
    s.Add("dry_run", &O::dry_run, "decide and report only");
  }
  absl::Status Validate() const { return common::config::CheckFields(*this); }
};

// What one check decided.
enum class CoordinatorAction {
  kFailed,        // stats or the recalibration failed (status says why)
  kIdle,          // fewer than min_tokens in the window
  kCooldown,      // within cooldown of the last recalibration
  kBalanced,      // min balancedness >= threshold
  kLow,           // below threshold, fewer than sustain checks in a row
  kSkipped,       // sustained low, but the new placement would not improve it enough
  kDryRun,        // would have recalibrated (dry_run)
  kRecalibrated,  // the protocol ran: every router switched to the new placement
};
// "failed", "idle", "cooldown", "balanced", "low", "skipped", "dry_run", "recalibrated".
const char* CoordinatorActionName(CoordinatorAction action);

struct CoordinatorDecision {
  absl::Time time;
  CoordinatorAction action = CoordinatorAction::kIdle;
  absl::Status status;               // kFailed only
  uint64_t placement_version = 0;    // active when the check started
  uint64_t window_tokens = 0;        // all routers, all layers
  bool measured = false;             // balancedness from worker tokens (else expected)
  std::vector<double> balancedness;  // per decoder layer (dense layers: 1); empty if no stats
  double min_balancedness = 1.0;     // over MoE layers
  int low_checks = 0;                // the streak after this check
  int routers_converged = 0;         // routers switched to finish an interrupted recalibration
  // Set when a new placement was computed (skipped, dry_run, recalibrated, or a failed apply).
  std::optional<RecalibrationReport> report;
};

class RecalibrationCoordinator {
 public:
  // REQUIRES: options.Validate() is OK. `transport`, `clock` and `registry` are borrowed and
  // must outlive the coordinator. The first check is due now.
  RecalibrationCoordinator(const RecalibrationCoordinatorOptions& options,
                           RecalibrationTransport& transport, common::Clock& clock,
                           common::metrics::Registry& registry);
  ~RecalibrationCoordinator();
  RecalibrationCoordinator(const RecalibrationCoordinator&) = delete;
  RecalibrationCoordinator& operator=(const RecalibrationCoordinator&) = delete;

  // Runs a check if one is due (now >= next_check()) and schedules the next one `interval`
  // after now; nullopt when none was due.
  std::optional<CoordinatorDecision> Tick();
  // Runs one check now (does not move next_check()). May block for the protocol's RPCs.
  CoordinatorDecision Check();

  absl::Time next_check() const { return next_check_; }
  const RecalibrationCoordinatorOptions& options() const { return options_; }

 private:
  struct Metrics;
  // Counts `d` (and a recalibration with `recalibration_result`, when not null) and returns it.
  CoordinatorDecision Finish(CoordinatorDecision d, const char* recalibration_result);

  const RecalibrationCoordinatorOptions options_;
  RecalibrationTransport& transport_;
  common::Clock& clock_;
  std::unique_ptr<Metrics> metrics_;

  absl::Time next_check_;
  int low_checks_ = 0;
  std::optional<absl::Time> cooldown_until_;
};

}  // namespace moe::router
