// `moe admin ACTION --routers HOST:PORT[,...] ...` (DESIGN.md §2, §6): operator actions against a
// running cluster. Machine-readable output on stdout, one JSON object per line; errors on stderr.
// Exit codes: 0 ok, 1 failure, 2 usage.
//
// calibrate-router [--window 300s] [--slots N] [--dry-run] [--timeout 60s]
//   Runs the recalibration protocol of services/router/core/recalibration.h over gRPC: GetStats
//   on every router, compute the new placement, LoadExperts on the workers, SetPlacement on every
//   router (each answers once its old version drained), UnloadExperts. Prints one line:
//   {previous_version, version, dry_run, slots_per_worker, window_tokens, balancedness_before,
//   balancedness_after (expected, per layer), experts_loaded, experts_unloaded,
//   routers_converged (routers first brought to the newest version when an earlier run was
//   interrupted mid-switch), placement}.
//
// stats [--window 300s] [--timeout 60s]
//   One line per router, in --routers order: {router, router_id, model, num_requests_waiting,
//   num_requests_running, kv_usage_ratio, placement_version, load_window_ms, expert_tokens
//   ([layers * experts]), and with remote experts: num_workers, worker_tokens ({"<worker id>":
//   [tokens per layer]}), measured_balancedness (per layer: mean over the placement's workers of
//   the tokens they processed / the max; dense layers 1), min_measured_balancedness (over MoE
//   layers), expected_balancedness (per layer, from expert_tokens and the placement)}.
//   With several routers, one more line sums them (the cluster's figure):
//   {"aggregate": true, routers, placement_version, window_tokens, worker_tokens,
//   measured_balancedness, min_measured_balancedness, expected_balancedness}, or
//   {"aggregate": true, "error": "..."} when the routers disagree on the placement.
//
// coordinate [--threshold 0.8] [--interval 30s] [--window 60s] [--sustain 3] [--min-tokens 1000]
//            [--cooldown 300s] [--slots N] [--min-improvement 0.02] [--dry-run] [--once]
//            [--timeout 60s] [--metrics-port P [--metrics-host 0.0.0.0]]
//   The automatic loop of services/router/core/recalibration_coordinator.h: every --interval it
//   judges the min measured balancedness over --window and recalibrates once it has stayed
//   below --threshold for --sustain checks (with >= --min-tokens in the window, not within
//   --cooldown of the last one, and only when the new placement raises the expected
//   balancedness by --min-improvement). Runs until SIGINT/SIGTERM (exit 0; a recalibration in
//   progress finishes first); --once runs one check (its --sustain defaults to 1) and exits 1 if
//   it failed. One line per check: {time, decision (idle | cooldown | balanced | low | skipped |
//   dry_run | recalibrated | failed), placement_version, window_tokens, balancedness_source
//   (measured | expected), balancedness (per layer), min_balancedness, low_checks,
//   routers_converged, and when a
//   placement was computed: recalibration {previous_version, version, slots_per_worker,
//   expected_before, expected_after, experts_loaded, experts_unloaded}; error when failed}.
//   With --metrics-port, /metrics serves moe_coordinator_* (port 0 picks one, announced first
//   as {"event":"listening","metrics":P}).
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "common/metrics/metrics_server.h"
#include "common/metrics/registry.h"
#include "nlohmann/json.hpp"
#include "services/router/core/placement_algorithm.h"
#include "services/router/core/recalibration.h"
#include "services/router/core/recalibration_coordinator.h"
#include "services/router/grpc_recalibration_transport.h"
#include "tools/moe/command.h"

namespace moe::cli {
namespace {

using router::GrpcRecalibrationTransport;

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "moe admin: %s\nusage: moe admin calibrate-router --routers HOST:PORT[,...] "
               "[--window 300s] [--slots N] [--dry-run] [--timeout 60s]\n"
               "       moe admin stats --routers HOST:PORT[,...] [--window 300s]\n"
               "       moe admin coordinate --routers HOST:PORT[,...] [--threshold 0.8] "
               "[--interval 30s] [--window 60s] [--sustain 3] [--min-tokens 1000] "
               "[--cooldown 300s] [--slots N] [--min-improvement 0.02] [--dry-run] [--once] "
               "[--timeout 60s] [--metrics-port P] [--metrics-host H]\n"
               "  every action: [--tls-ca F] [--tls-cert F --tls-key F] [--tls-server-name N] "
               "[--token-file F]\n",
               why.c_str());
  return 2;
}

nlohmann::json WorkerTokensJson(const router::WorkerTokens& tokens) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [id, per_layer] : tokens) j[absl::StrCat(id)] = per_layer;
  return j;
}

// Measured and expected balancedness of `load`'s placement into `j`.
void AddBalancedness(const router::ClusterLoad& load, nlohmann::json& j) {
  const auto measured = router::MeasuredBalancedness(load.placement, load.worker_tokens);
  j["num_workers"] = load.placement.workers.size();
  j["worker_tokens"] = WorkerTokensJson(load.worker_tokens);
  j["measured_balancedness"] = measured;
  j["min_measured_balancedness"] = router::MinOverMoeLayers(load.placement, measured);
  j["expected_balancedness"] = router::ExpectedBalancedness(load.placement, load.expert_tokens);
}

int RunStats(GrpcRecalibrationTransport& transport, const std::vector<std::string>& routers,
             absl::Duration window) {
  std::vector<router::RouterLoadReport> reports;
  bool all_remote = true;
  for (int i = 0; i < transport.num_routers(); ++i) {
    auto resp = transport.RawStats(i, window);
    if (!resp.ok()) {
      std::fprintf(stderr, "moe admin: %s\n", resp.status().ToString().c_str());
      return 1;
    }
    nlohmann::json j = {{"router", routers[i]},
                        {"router_id", resp->router_id()},
                        {"model", resp->model()},
                        {"num_requests_waiting", resp->num_requests_waiting()},
                        {"num_requests_running", resp->num_requests_running()},
                        {"kv_usage_ratio", resp->kv_usage_ratio()},
                        {"placement_version", resp->placement_version()},
                        {"load_window_ms", resp->expert_load().window_ms()}};
    j["expert_tokens"] = std::vector<uint64_t>(resp->expert_load().tokens().begin(),
                                               resp->expert_load().tokens().end());
    all_remote = all_remote && resp->has_placement();
    if (resp->has_placement()) {
      auto report = GrpcRecalibrationTransport::ToReport(*resp);
      auto load = report.ok() ? router::AggregateLoad(std::vector{*report}) : report.status();
      if (!load.ok()) {
        std::fprintf(stderr, "moe admin: %s: %s\n", routers[i].c_str(),
                     load.status().ToString().c_str());
        return 1;
      }
      AddBalancedness(*load, j);
      reports.push_back(*std::move(report));
    }
    std::printf("%s\n", j.dump().c_str());
  }
  if (routers.size() > 1 && all_remote) {
    nlohmann::json j = {{"aggregate", true}, {"routers", routers.size()}};
    auto load = router::AggregateLoad(reports);
    if (load.ok()) {
      j["placement_version"] = load->placement.version;
      j["window_tokens"] = load->window_tokens;
      AddBalancedness(*load, j);
    } else {
      j["error"] = std::string(load.status().message());
    }
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

int RunCalibrate(GrpcRecalibrationTransport& transport, absl::Duration window, int slots,
                 bool dry_run) {
  router::RecalibrationOptions o;
  o.window = window;
  o.slots_per_worker = slots;
  o.dry_run = dry_run;
  auto report = router::Recalibrate(transport, o);
  if (!report.ok()) {
    std::fprintf(stderr, "moe admin: calibrate-router: %s\n", report.status().ToString().c_str());
    return 1;
  }
  nlohmann::json j = {{"previous_version", report->previous_version},
                      {"version", report->version},
                      {"dry_run", o.dry_run},
                      {"slots_per_worker", report->slots_per_worker},
                      {"window_tokens", report->window_tokens},
                      {"balancedness_before", report->balancedness_before},
                      {"balancedness_after", report->balancedness_after},
                      {"experts_loaded", report->experts_loaded},
                      {"experts_unloaded", report->experts_unloaded},
                      {"routers_converged", report->routers_converged},
                      {"placement", report->placement.DebugString()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

nlohmann::json DecisionJson(const router::CoordinatorDecision& d) {
  nlohmann::json j = {{"time", absl::FormatTime(absl::RFC3339_full, d.time, absl::UTCTimeZone())},
                      {"decision", router::CoordinatorActionName(d.action)},
                      {"placement_version", d.placement_version},
                      {"window_tokens", d.window_tokens},
                      {"balancedness_source", d.measured ? "measured" : "expected"},
                      {"balancedness", d.balancedness},
                      {"min_balancedness", d.min_balancedness},
                      {"low_checks", d.low_checks},
                      {"routers_converged", d.routers_converged}};
  if (d.report.has_value()) {
    j["recalibration"] = {{"previous_version", d.report->previous_version},
                          {"version", d.report->version},
                          {"slots_per_worker", d.report->slots_per_worker},
                          {"expected_before", d.report->balancedness_before},
                          {"expected_after", d.report->balancedness_after},
                          {"experts_loaded", d.report->experts_loaded},
                          {"experts_unloaded", d.report->experts_unloaded}};
  }
  if (!d.status.ok()) j["error"] = d.status.ToString();
  return j;
}

// The channel every action dials routers and workers with: TLS / mTLS (--tls-ca, --tls-cert,
// --tls-key, --tls-server-name) or a bearer token (--token-file), as the cluster's grpc.auth
// expects of the admin role (SECURITY.md). No flag: plaintext.
common::rpc::ChannelOptions AdminChannel(const Args& args) {
  common::rpc::ChannelOptions o;
  o.tls.ca_file = args.GetOr("tls-ca", "");
  o.tls.cert_file = args.GetOr("tls-cert", "");
  o.tls.key_file = args.GetOr("tls-key", "");
  o.tls.server_name_override = args.GetOr("tls-server-name", "");
  o.tls.enabled =
      !o.tls.ca_file.empty() || !o.tls.cert_file.empty() || !o.tls.server_name_override.empty();
  o.token_file = args.GetOr("token-file", "");
  return o;
}

int RunCoordinate(const Args& args, const std::vector<std::string>& routers,
                  absl::Duration timeout) {
  router::RecalibrationCoordinatorOptions o;
  const bool once = args.Has("once");
  auto duration = [&](const char* flag, absl::Duration* out) {
    if (auto v = args.Get(flag); v.has_value()) {
      return absl::ParseDuration(*v, out) ? absl::OkStatus()
                                          : absl::InvalidArgumentError(absl::StrCat(
                                                "--", flag, " must be a duration such as 30s"));
    }
    return absl::OkStatus();
  };
  for (auto [flag, field] : {std::pair{"interval", &o.interval}, std::pair{"window", &o.window},
                             std::pair{"cooldown", &o.cooldown}}) {
    if (auto s = duration(flag, field); !s.ok()) return Usage(std::string(s.message()));
  }
  auto threshold = args.GetDouble("threshold", o.threshold);
  auto min_improvement = args.GetDouble("min-improvement", o.min_improvement);
  auto sustain = args.GetInt("sustain", once ? 1 : o.sustain);
  auto min_tokens = args.GetInt("min-tokens", o.min_tokens);
  auto slots = args.GetInt("slots", 0);
  auto metrics_port = args.GetInt("metrics-port", -1);
  for (const absl::Status& s : {threshold.status(), min_improvement.status(), sustain.status(),
                                min_tokens.status(), slots.status(), metrics_port.status()}) {
    if (!s.ok()) return Usage(std::string(s.message()));
  }
  o.threshold = *threshold;
  o.min_improvement = *min_improvement;
  o.sustain = static_cast<int>(*sustain);
  o.min_tokens = *min_tokens;
  o.slots_per_worker = static_cast<int>(*slots);
  o.dry_run = args.Has("dry-run");
  if (auto s = o.Validate(); !s.ok()) return Usage(std::string(s.message()));
  if (once && o.sustain > 1) return Usage("--once judges one check: --sustain must be 1");

  // Signals are taken with sigtimedwait between checks; block them before any thread (gRPC's)
  // starts so that none of those threads takes them either.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  common::metrics::Registry registry;
  std::unique_ptr<common::metrics::MetricsServer> metrics;
  if (*metrics_port >= 0) {
    common::metrics::MetricsServerOptions mo;
    mo.host = args.GetOr("metrics-host", mo.host);
    mo.port = static_cast<int>(*metrics_port);
    auto server = common::metrics::MetricsServer::Start(mo, registry);
    if (!server.ok()) {
      std::fprintf(stderr, "moe admin: metrics: %s\n", server.status().ToString().c_str());
      return 1;
    }
    metrics = *std::move(server);
    std::printf("{\"event\":\"listening\",\"metrics\":%d}\n", metrics->port());
    std::fflush(stdout);
  }
  GrpcRecalibrationTransport transport(routers,
                                       {.timeout = timeout, .channel = AdminChannel(args)});
  if (auto s = transport.Connect(); !s.ok()) {
    std::fprintf(stderr, "moe admin: %s\n", s.ToString().c_str());
    return 1;
  }
  common::Clock& clock = common::SystemClock::Get();
  router::RecalibrationCoordinator coordinator(o, transport, clock, registry);
  for (;;) {
    std::optional<router::CoordinatorDecision> d = once ? coordinator.Check() : coordinator.Tick();
    if (d.has_value()) {
      std::printf("%s\n", DecisionJson(*d).dump().c_str());
      std::fflush(stdout);
      if (once) return d->action == router::CoordinatorAction::kFailed ? 1 : 0;
    }
    const absl::Duration wait =
        std::max(absl::ZeroDuration(), coordinator.next_check() - clock.Now());
    const timespec ts = absl::ToTimespec(wait);
    const int sig = ::sigtimedwait(&signals, nullptr, &ts);
    if (sig == SIGINT || sig == SIGTERM) {
      std::fprintf(stderr, "moe admin: coordinate: signal %d, exiting\n", sig);
      return 0;
    }
  }
}

int RunAdmin(const Args& /*parsed*/, const std::vector<std::string>& argv) {
  auto args = Args::Parse(argv, {"dry-run", "once"});
  if (!args.ok()) return Usage(std::string(args.status().message()));
  if (args->positional().size() != 1) {
    return Usage("give one action: calibrate-router | stats | coordinate");
  }
  const std::string action = args->positional()[0];
  std::vector<std::string> known = {"routers",  "window",  "timeout",         "tls-ca",
                                    "tls-cert", "tls-key", "tls-server-name", "token-file"};
  if (action == "calibrate-router") {
    known.insert(known.end(), {"slots", "dry-run"});
  } else if (action == "coordinate") {
    known.insert(known.end(),
                 {"threshold", "interval", "sustain", "min-tokens", "cooldown", "slots",
                  "min-improvement", "dry-run", "once", "metrics-port", "metrics-host"});
  } else if (action != "stats") {
    return Usage("unknown action " + action);
  }
  if (auto s = args->CheckKnown(known); !s.ok()) return Usage(std::string(s.message()));
  std::vector<std::string> routers =
      absl::StrSplit(args->GetOr("routers", ""), ',', absl::SkipEmpty());
  if (routers.empty()) return Usage("--routers is required");
  absl::Duration timeout;
  if (!absl::ParseDuration(args->GetOr("timeout", "60s"), &timeout) ||
      timeout <= absl::ZeroDuration()) {
    return Usage("--timeout must be a duration such as 60s");
  }
  if (action == "coordinate") return RunCoordinate(*args, routers, timeout);

  absl::Duration window;
  if (!absl::ParseDuration(args->GetOr("window", "300s"), &window) ||
      window <= absl::ZeroDuration()) {
    return Usage("--window must be a duration such as 300s");
  }
  auto slots = args->GetInt("slots", 0);
  if (!slots.ok() || *slots < 0) return Usage("--slots must be >= 0");
  GrpcRecalibrationTransport transport(routers,
                                       {.timeout = timeout, .channel = AdminChannel(*args)});
  if (auto s = transport.Connect(); !s.ok()) {
    std::fprintf(stderr, "moe admin: %s\n", s.ToString().c_str());
    return 1;
  }
  if (action == "stats") return RunStats(transport, routers, window);
  return RunCalibrate(transport, window, static_cast<int>(*slots), args->Has("dry-run"));
}

MOE_REGISTER_COMMAND("admin", "operator actions: calibrate-router, stats, coordinate", RunAdmin);

}  // namespace
}  // namespace moe::cli
