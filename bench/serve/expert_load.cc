#include "bench/serve/expert_load.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace moe::bench::serve {

absl::StatusOr<ExpertLoad> ParseAdminStats(const std::string& line) try {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object() || !j.contains("expert_tokens") || !j["expert_tokens"].is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a `moe admin stats` line with expert_tokens: ", line.substr(0, 200)));
  }
  if (!j.contains("worker_tokens") || !j["worker_tokens"].is_object()) {
    return absl::InvalidArgumentError(
        "`moe admin stats` line without worker_tokens (a router without expert workers?)");
  }
  ExpertLoad load;
  for (const auto& v : j["expert_tokens"]) load.expert_tokens.push_back(v.get<double>());
  for (const auto& [id, per_layer] : j["worker_tokens"].items()) {
    std::vector<double>& w = load.workers[id];
    for (const auto& v : per_layer) w.push_back(v.get<double>());
    if (load.num_layers == 0) load.num_layers = static_cast<int32_t>(w.size());
    if (static_cast<int32_t>(w.size()) != load.num_layers) {
      return absl::InvalidArgumentError("worker_tokens: workers with different layer counts");
    }
  }
  if (load.num_layers == 0 && j.contains("measured_balancedness")) {
    load.num_layers = static_cast<int32_t>(j["measured_balancedness"].size());
  }
  if (load.num_layers <= 0 || load.expert_tokens.empty() ||
      load.expert_tokens.size() % load.num_layers != 0) {
    return absl::InvalidArgumentError(absl::StrCat("expert_tokens (", load.expert_tokens.size(),
                                                   ") is not layers (", load.num_layers,
                                                   ") x experts"));
  }
  load.num_experts = static_cast<int32_t>(load.expert_tokens.size() / load.num_layers);
  load.num_workers = j.value("num_workers", static_cast<int32_t>(load.workers.size()));
  return load;
} catch (const nlohmann::json::exception& e) {  // a count that is not a number
  return absl::InvalidArgumentError(absl::StrCat("`moe admin stats` line: ", e.what()));
}

absl::StatusOr<ExpertLoad> LoadBetween(const ExpertLoad& earlier, const ExpertLoad& later) {
  if (earlier.num_layers != later.num_layers || earlier.num_experts != later.num_experts) {
    return absl::InvalidArgumentError("expert load samples of different shapes");
  }
  ExpertLoad d = later;
  for (size_t i = 0; i < d.expert_tokens.size(); ++i) {
    d.expert_tokens[i] -= earlier.expert_tokens[i];
  }
  for (auto& [id, per_layer] : d.workers) {
    auto it = earlier.workers.find(id);
    if (it == earlier.workers.end()) continue;
    for (size_t l = 0; l < per_layer.size(); ++l) per_layer[l] -= it->second[l];
  }
  return d;
}

std::vector<double> WorkerBalancedness(const ExpertLoad& load) {
  std::vector<double> out(load.num_layers, 1.0);
  const int32_t n = std::max<int32_t>(load.num_workers, static_cast<int32_t>(load.workers.size()));
  for (int32_t l = 0; l < load.num_layers; ++l) {
    double sum = 0, max = 0;
    for (const auto& [id, per_layer] : load.workers) {
      sum += per_layer[l];
      max = std::max(max, per_layer[l]);
    }
    if (max > 0 && n > 0) out[l] = sum / n / max;
  }
  return out;
}

std::string ExpertLoadTable(const ExpertLoad& load) {
  std::string out = "# layer expert tokens share_of_layer\n";
  for (int32_t l = 0; l < load.num_layers; ++l) {
    double sum = 0;
    for (int32_t e = 0; e < load.num_experts; ++e)
      sum += load.expert_tokens[l * load.num_experts + e];
    for (int32_t e = 0; e < load.num_experts; ++e) {
      const double t = load.expert_tokens[l * load.num_experts + e];
      absl::StrAppend(&out, l, " ", e, " ", t, " ", sum > 0 ? t / sum : 0.0, "\n");
    }
    out += "\n";
  }
  return out;
}

std::string WorkerLoadTable(const ExpertLoad& load) {
  std::string out = "# layer worker tokens tokens_over_layer_mean\n";
  const int32_t n = std::max<int32_t>(load.num_workers, static_cast<int32_t>(load.workers.size()));
  for (int32_t l = 0; l < load.num_layers; ++l) {
    double sum = 0;
    for (const auto& [id, per_layer] : load.workers) sum += per_layer[l];
    const double mean = n > 0 ? sum / n : 0;
    int32_t w = 0;
    for (const auto& [id, per_layer] : load.workers) {
      absl::StrAppend(&out, l, " ", w++, " ", per_layer[l], " ",
                      mean > 0 ? per_layer[l] / mean : 0.0, "\n");
    }
    for (; w < n; ++w) absl::StrAppend(&out, l, " ", w, " 0 0\n");  // idle workers
    out += "\n";
  }
  return out;
}

}  // namespace moe::bench::serve
