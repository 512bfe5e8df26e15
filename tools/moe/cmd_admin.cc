// `moe admin calibrate-router --routers HOST:PORT[,...] [--window 300s] [--slots N] [--dry-run]`
// and `moe admin stats --routers HOST:PORT[,...] [--window 300s]` (DESIGN.md §2, §6): operator
// actions against a running cluster. Output: one JSON line (stats: one per router) on stdout.
//
// calibrate-router runs the recalibration protocol of services/router/core/recalibration.h over
// gRPC: GetStats on every router, compute the new placement, LoadExperts on the workers,
// SetPlacement on every router (each answers once its old version drained), UnloadExperts.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/grpc/channel_factory.h"
#include "common/grpc/status.h"
#include "grpcpp/client_context.h"
#include "moe/expert_worker/v1/expert_worker.grpc.pb.h"
#include "moe/router/v1/router.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "services/router/core/placement_algorithm.h"
#include "services/router/core/recalibration.h"
#include "services/router/placement_proto.h"
#include "tools/moe/command.h"

namespace moe::cli {
namespace {

namespace rpb = ::moe::router::v1;
namespace wpb = ::moe::expert_worker::v1;

class GrpcRecalibrationTransport : public router::RecalibrationTransport {
 public:
  GrpcRecalibrationTransport(std::vector<std::string> routers, absl::Duration timeout)
      : routers_(std::move(routers)), timeout_(timeout) {}

  absl::Status Connect() {
    for (const std::string& r : routers_) {
      auto ch = common::rpc::CreateChannel(r);
      if (!ch.ok()) return ch.status();
      stubs_.push_back(rpb::Router::NewStub(*ch));
    }
    return absl::OkStatus();
  }

  int num_routers() const override { return static_cast<int>(routers_.size()); }

  absl::StatusOr<rpb::GetStatsResponse> RawStats(int router, absl::Duration window) {
    rpb::GetStatsRequest req;
    req.set_load_window_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(window)));
    rpb::GetStatsResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    if (auto s = common::rpc::FromGrpcStatus(stubs_[router]->GetStats(&ctx, req, &resp)); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat(routers_[router], ": GetStats: ", s.message()));
    }
    return resp;
  }

  absl::StatusOr<router::RouterLoadReport> GetStats(int router, absl::Duration window) override {
    auto resp = RawStats(router, window);
    if (!resp.ok()) return resp.status();
    if (!resp->has_placement()) {
      return absl::FailedPreconditionError(
          absl::StrCat(routers_[router], " runs its experts in-process: nothing to place"));
    }
    auto table = router::PlacementFromProto(resp->placement());
    if (!table.ok()) return table.status();
    router::RouterLoadReport r{resp->router_id(), *std::move(table), {}};
    r.expert_tokens.assign(resp->expert_load().tokens().begin(),
                           resp->expert_load().tokens().end());
    return r;
  }

  absl::Status SetPlacement(int router, const router::PlacementTable& table) override {
    rpb::SetPlacementRequest req;
    router::PlacementToProto(table, req.mutable_placement());
    rpb::SetPlacementResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    auto s = common::rpc::FromGrpcStatus(stubs_[router]->SetPlacement(&ctx, req, &resp));
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat(routers_[router], ": SetPlacement: ", s.message()));
    }
    return absl::OkStatus();
  }

  template <typename Req>
  static void AddKeys(const std::vector<model::ExpertKey>& keys, Req* req) {
    for (const auto& k : keys) {
      auto* key = req->add_experts();
      key->set_layer_idx(static_cast<int32_t>(k.layer));
      key->set_expert_id(static_cast<int32_t>(k.expert));
    }
  }

  absl::Status LoadExperts(const std::string& address,
                           const std::vector<model::ExpertKey>& keys) override {
    auto stub = WorkerStub(address);
    if (!stub.ok()) return stub.status();
    wpb::LoadExpertsRequest req;
    AddKeys(keys, &req);
    wpb::LoadExpertsResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    auto s = common::rpc::FromGrpcStatus((*stub)->LoadExperts(&ctx, req, &resp));
    return s.ok() ? s
                  : absl::Status(s.code(), absl::StrCat(address, ": LoadExperts: ", s.message()));
  }

  absl::Status UnloadExperts(const std::string& address,
                             const std::vector<model::ExpertKey>& keys) override {
    auto stub = WorkerStub(address);
    if (!stub.ok()) return stub.status();
    wpb::UnloadExpertsRequest req;
    AddKeys(keys, &req);
    wpb::UnloadExpertsResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
    auto s = common::rpc::FromGrpcStatus((*stub)->UnloadExperts(&ctx, req, &resp));
    return s.ok() ? s
                  : absl::Status(s.code(), absl::StrCat(address, ": UnloadExperts: ", s.message()));
  }

 private:
  absl::StatusOr<std::unique_ptr<wpb::ExpertWorker::Stub>> WorkerStub(const std::string& address) {
    auto ch = common::rpc::CreateChannel(address);
    if (!ch.ok()) return ch.status();
    return wpb::ExpertWorker::NewStub(*ch);
  }

  std::vector<std::string> routers_;
  absl::Duration timeout_;
  std::vector<std::unique_ptr<rpb::Router::Stub>> stubs_;
};

int Usage(const std::string& why) {
  std::fprintf(stderr,
               "moe admin: %s\nusage: moe admin calibrate-router --routers HOST:PORT[,...] "
               "[--window 300s] [--slots N] [--dry-run] [--timeout 60s]\n"
               "       moe admin stats --routers HOST:PORT[,...] [--window 300s]\n",
               why.c_str());
  return 2;
}

int RunAdmin(const Args& /*parsed*/, const std::vector<std::string>& argv) {
  auto args = Args::Parse(argv, {"dry-run"});
  if (!args.ok()) return Usage(std::string(args.status().message()));
  if (auto s = args->CheckKnown({"routers", "window", "slots", "dry-run", "timeout"}); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  if (args->positional().size() != 1) return Usage("give one action: calibrate-router | stats");
  const std::string action = args->positional()[0];
  std::vector<std::string> routers =
      absl::StrSplit(args->GetOr("routers", ""), ',', absl::SkipEmpty());
  if (routers.empty()) return Usage("--routers is required");
  absl::Duration window, timeout;
  if (!absl::ParseDuration(args->GetOr("window", "300s"), &window) ||
      window <= absl::ZeroDuration()) {
    return Usage("--window must be a duration such as 300s");
  }
  if (!absl::ParseDuration(args->GetOr("timeout", "60s"), &timeout) ||
      timeout <= absl::ZeroDuration()) {
    return Usage("--timeout must be a duration such as 60s");
  }
  auto slots = args->GetInt("slots", 0);
  if (!slots.ok() || *slots < 0) return Usage("--slots must be >= 0");

  GrpcRecalibrationTransport transport(routers, timeout);
  if (auto s = transport.Connect(); !s.ok()) {
    std::fprintf(stderr, "moe admin: %s\n", s.ToString().c_str());
    return 1;
  }
  if (action == "stats") {
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
      std::vector<uint64_t> tokens(resp->expert_load().tokens().begin(),
                                   resp->expert_load().tokens().end());
      j["expert_tokens"] = tokens;
      if (resp->has_placement()) {
        auto table = router::PlacementFromProto(resp->placement());
        if (table.ok() && table->replicas.size() == tokens.size()) {
          j["balancedness"] = router::ExpectedBalancedness(*table, tokens);
          j["num_workers"] = table->workers.size();
        }
      }
      std::printf("%s\n", j.dump().c_str());
    }
    return 0;
  }
  if (action != "calibrate-router") return Usage("unknown action " + action);
  router::RecalibrationOptions o;
  o.window = window;
  o.slots_per_worker = static_cast<int>(*slots);
  o.dry_run = args->Has("dry-run");
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
                      {"placement", report->placement.DebugString()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

MOE_REGISTER_COMMAND("admin", "operator actions: calibrate-router, stats", RunAdmin);

}  // namespace
}  // namespace moe::cli
