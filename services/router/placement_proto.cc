#include "services/router/placement_proto.h"

#include "absl/strings/str_cat.h"

namespace moe::router {

void PlacementToProto(const PlacementTable& table, moe::router::v1::PlacementTable* out) {
  out->set_version(table.version);
  out->set_num_layers(table.num_layers);
  out->set_num_experts(table.num_experts);
  for (const PlacementWorker& w : table.workers) {
    auto* pw = out->add_workers();
    pw->set_worker_id(w.worker_id);
    pw->set_address(w.address);
  }
  for (int32_t l = 0; l < table.num_layers; ++l) {
    for (int32_t e = 0; e < table.num_experts; ++e) {
      const auto& r = table.Replicas(l, e);
      if (r.empty()) continue;
      auto* ep = out->add_experts();
      ep->set_layer_idx(l);
      ep->set_expert_id(e);
      for (int32_t w : r) ep->add_worker_ids(w);
    }
  }
}

absl::StatusOr<PlacementTable> PlacementFromProto(const moe::router::v1::PlacementTable& proto) {
  PlacementTable t;
  t.version = proto.version();
  t.num_layers = proto.num_layers();
  t.num_experts = proto.num_experts();
  if (t.num_layers <= 0 || t.num_experts <= 0 || t.num_layers > 4096 || t.num_experts > 65536) {
    return absl::InvalidArgumentError("placement: num_layers / num_experts out of range");
  }
  for (const auto& w : proto.workers()) t.workers.push_back({w.worker_id(), w.address()});
  t.replicas.resize(static_cast<size_t>(t.num_layers) * t.num_experts);
  for (const auto& ep : proto.experts()) {
    if (ep.layer_idx() < 0 || ep.layer_idx() >= t.num_layers || ep.expert_id() < 0 ||
        ep.expert_id() >= t.num_experts) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: expert ", ep.expert_id(), " of layer ", ep.layer_idx(), " out of range"));
    }
    auto& r = t.MutableReplicas(ep.layer_idx(), ep.expert_id());
    if (!r.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "placement: expert ", ep.expert_id(), " of layer ", ep.layer_idx(), " listed twice"));
    }
    r.assign(ep.worker_ids().begin(), ep.worker_ids().end());
  }
  return t;
}

}  // namespace moe::router
