#include "services/router/testing/fake_recalibration_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace moe::router::testing {

FakeRecalibrationTransport::FakeRecalibrationTransport(int num_routers) {
  PlacementTable t;
  t.num_layers = 1;
  t.num_experts = 6;
  t.workers = {{0, "w0"}, {1, "w1"}, {2, "w2"}};
  t.replicas.resize(6);
  for (int e = 0; e < 6; ++e) t.MutableReplicas(0, e) = {e % 3};
  active_.assign(num_routers, t);
  for (const auto& [id, keys] : t.ExpertsByWorker()) {
    resident_[t.FindWorker(id)->address].insert(keys.begin(), keys.end());
  }
  SetSkewed();
}

void FakeRecalibrationTransport::SetLoad(std::vector<uint64_t> expert_tokens,
                                         std::optional<WorkerTokens> worker_tokens) {
  expert_tokens_ = std::move(expert_tokens);
  if (worker_tokens.has_value()) {
    worker_tokens_ = *std::move(worker_tokens);
    return;
  }
  worker_tokens_.clear();
  for (int e = 0; e < 6; ++e) {
    const auto& reps = active_[0].Replicas(0, e);
    for (int32_t w : reps) {
      auto& v = worker_tokens_[w];
      v.resize(1);
      v[0] += expert_tokens_[e] / reps.size();
    }
  }
}

absl::StatusOr<RouterLoadReport> FakeRecalibrationTransport::GetStats(int router,
                                                                      absl::Duration window) {
  log_ += absl::StrCat("stats", router, " ");
  windows_.insert(window);
  if (stats_error_) return absl::UnavailableError("router down");
  return RouterLoadReport{absl::StrCat("r", router), active_[router], expert_tokens_,
                          worker_tokens_};
}

absl::Status FakeRecalibrationTransport::SetPlacement(int router, const PlacementTable& table) {
  log_ += absl::StrCat("set", router, " ");
  active_[router] = table;
  if (check_live_replicas_) CheckLiveReplicas();
  return absl::OkStatus();
}

absl::Status FakeRecalibrationTransport::LoadExperts(const std::string& worker,
                                                     const std::vector<model::ExpertKey>& keys) {
  log_ += "load ";
  if (load_failures_ > 0) {
    --load_failures_;
    return absl::UnavailableError("w1: LoadExperts: connection refused");
  }
  resident_[worker].insert(keys.begin(), keys.end());
  return absl::OkStatus();
}

absl::Status FakeRecalibrationTransport::UnloadExperts(const std::string& worker,
                                                       const std::vector<model::ExpertKey>& keys) {
  log_ += "unload ";
  for (const auto& key : keys) resident_[worker].erase(key);
  if (check_live_replicas_) CheckLiveReplicas();
  return absl::OkStatus();
}

void FakeRecalibrationTransport::CheckLiveReplicas() {
  for (const PlacementTable& t : active_) {
    for (int e = 0; e < t.num_experts; ++e) {
      for (int32_t w : t.Replicas(0, e)) {
        EXPECT_TRUE(resident_[t.FindWorker(w)->address].count({0, e}))
            << "expert " << e << " not resident on w" << w << " in v" << t.version;
      }
    }
  }
}

}  // namespace moe::router::testing
