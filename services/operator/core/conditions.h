// Standard status conditions (metav1.Condition): type, status True/False/Unknown, reason,
// message, lastTransitionTime, observedGeneration; a list-map keyed by type.
#pragma once

#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace moe::op {

// Sets condition `type` in `conditions` (a JSON array, created when null). lastTransitionTime
// moves to `now` only when the status changes; reason, message and observedGeneration always
// follow. Returns whether anything but observedGeneration changed.
bool SetCondition(nlohmann::json& conditions, const std::string& type, bool status,
                  const std::string& reason, const std::string& message, absl::Time now,
                  int64_t generation);

// The condition of `type` in `conditions`, or null.
const nlohmann::json* FindCondition(const nlohmann::json& conditions, const std::string& type);

}  // namespace moe::op
