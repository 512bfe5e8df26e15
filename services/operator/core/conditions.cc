#include "services/operator/core/conditions.h"

#include "services/operator/core/cluster_spec.h"

namespace moe::op {

const nlohmann::json* FindCondition(const nlohmann::json& conditions, const std::string& type) {
  if (!conditions.is_array()) return nullptr;
  for (const auto& c : conditions) {
    if (c.value("type", "") == type) return &c;
  }
  return nullptr;
}

bool SetCondition(nlohmann::json& conditions, const std::string& type, bool status,
                  const std::string& reason, const std::string& message, absl::Time now,
                  int64_t generation) {
  if (!conditions.is_array()) conditions = nlohmann::json::array();
  const std::string s = status ? "True" : "False";
  for (auto& c : conditions) {
    if (c.value("type", "") != type) continue;
    const bool changed = c.value("status", "") != s || c.value("reason", "") != reason ||
                         c.value("message", "") != message;
    if (c.value("status", "") != s) c["lastTransitionTime"] = Rfc3339(now);
    c["status"] = s;
    c["reason"] = reason;
    c["message"] = message;
    c["observedGeneration"] = generation;
    return changed;
  }
  conditions.push_back(nlohmann::json{{"type", type},
                                      {"status", s},
                                      {"reason", reason},
                                      {"message", message},
                                      {"lastTransitionTime", Rfc3339(now)},
                                      {"observedGeneration", generation}});
  return true;
}

}  // namespace moe::op
