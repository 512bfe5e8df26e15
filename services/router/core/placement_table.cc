#include "services/router/core/placement_table.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/model/expert_spec.h"

namespace moe::router {
const PlacementWorker* PlacementTable::FindWorker(int32_t worker_id) const {
  for (const PlacementWorker& w : workers) {
    if (w.worker_id == worker_id) return &w;
  }
  return nullptr;
}

std::map<int32_t, std::vector<model::ExpertKey>> PlacementTable::ExpertsByWorker() const {
  std::map<int32_t, std::vector<model::ExpertKey>> out;
  for (const PlacementWorker& w : workers) out[w.worker_id];
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t e = 0; e < num_experts; ++e) {
      for (int32_t w : Replicas(l, e)) out[w].push_back({l, e});
    }
  }
  return out;
}

absl::Status PlacementTable::Validate(const model::ModelConfig& config) const {
  if (num_layers != config.num_hidden_layers || num_experts != config.num_experts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "placement: ", num_layers, " layers x ", num_experts, " experts, the model has ",
        config.num_hidden_layers, " x ", config.num_experts));
  }
  if (replicas.size() != static_cast<size_t>(num_layers) * num_experts) {
    return absl::InvalidArgumentError("placement: replica list size != layers x experts");
  }
  std::set<int32_t> ids;
  for (const PlacementWorker& w : workers) {
    if (w.worker_id < 0 || !ids.insert(w.worker_id).second || w.address.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("placement: worker id ", w.worker_id,
                                                     " is negative, repeated or has no address"));
    }
  }
  for (int64_t l = 0; l < num_layers; ++l) {
    for (int64_t e = 0; e < num_experts; ++e) {
      const std::vector<int32_t>& r = Replicas(l, e);
      if (!config.IsMoeLayer(l)) {
        if (!r.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("placement: layer ", l, " is dense"));
        }
        continue;
      }
      if (r.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("placement: expert ", e, " of layer ", l, " has no replica"));
      }
      std::set<int32_t> seen;
      for (int32_t w : r) {
        if (!ids.count(w) || !seen.insert(w).second) {
          return absl::InvalidArgumentError(absl::StrCat("placement: expert ", e, " of layer ", l,
                                                         ": unknown or repeated worker ", w));
        }
      }
    }
  }
  return absl::OkStatus();
}

std::string PlacementTable::DebugString() const {
  std::string s = absl::StrCat("v", version);
  for (const PlacementWorker& w : workers) absl::StrAppend(&s, " w", w.worker_id, "=", w.address);
  for (int64_t l = 0; l < num_layers; ++l) {
    bool any = false;
    for (int64_t e = 0; e < num_experts; ++e) {
      if (Replicas(l, e).empty()) continue;
      if (!any) absl::StrAppend(&s, " | L", l);
      any = true;
      absl::StrAppend(&s, " E", e, ":[", absl::StrJoin(Replicas(l, e), ","), "]");
    }
  }
  return s;
}

absl::StatusOr<PlacementTable> BuildPlacement(const std::vector<std::string>& addresses,
                                              const std::vector<std::string>& specs, int replicas,
                                              const model::ModelConfig& config) {
  PlacementTable t;
  t.num_layers = static_cast<int32_t>(config.num_hidden_layers);
  t.num_experts = static_cast<int32_t>(config.num_experts);
  t.replicas.resize(static_cast<size_t>(t.num_layers) * t.num_experts);
  const int32_t num_workers = static_cast<int32_t>(addresses.size());
  for (int32_t i = 0; i < num_workers; ++i) t.workers.push_back({i, addresses[i]});
  if (num_workers == 0) return absl::InvalidArgumentError("experts.workers: no worker addresses");
  if (specs.empty()) {
    if (replicas < 1 || replicas > num_workers) {
      return absl::InvalidArgumentError(
          absl::StrCat("experts.replicas: ", replicas, " is not in [1, ", num_workers, "]"));
    }
    for (int64_t l = 0; l < t.num_layers; ++l) {
      if (!config.IsMoeLayer(l)) continue;
      for (int64_t e = 0; e < t.num_experts; ++e) {
        for (int i = 0; i < replicas; ++i) {
          t.MutableReplicas(l, e).push_back(static_cast<int32_t>((e + i) % num_workers));
        }
      }
    }
  }
  for (const std::string& spec : specs) {
    std::vector<absl::string_view> kv = absl::StrSplit(spec, '=');
    absl::StatusOr<std::vector<model::ExpertKey>> keys =
        kv.size() == 2 ? model::ParseExpertSpecs({std::string(kv[0])}, config)
                       : absl::InvalidArgumentError("no '='");
    if (!keys.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("experts.placement: \"", spec,
                                                     "\" is not L:E=w1,w2 within the model (",
                                                     keys.status().message(), ")"));
    }
    std::vector<int32_t> ws;
    for (absl::string_view w : absl::StrSplit(kv[1], ',')) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(w, &id) || id < 0 || id >= num_workers) {
        return absl::InvalidArgumentError(
            absl::StrCat("experts.placement: \"", spec, "\": bad worker index \"", w, "\""));
      }
      ws.push_back(id);
    }
    for (const model::ExpertKey& k : *keys) {
      for (int32_t w : ws) {
        auto& r = t.MutableReplicas(k.layer, k.expert);
        if (std::find(r.begin(), r.end(), w) == r.end()) r.push_back(w);
      }
    }
  }
  if (absl::Status s = t.Validate(config); !s.ok()) return s;
  return t;
}

}  // namespace moe::router
