// Text specs of (layer, expert) sets, as config files and flags write them (expert workers'
// resident experts, the router's initial placement): "L:E", "L:E1-E2" (a range of experts),
// "L1-L2:E..." (a range of layers) and "*:E..." ('*' = every MoE layer of the model).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/checkpoint.h"
#include "common/model/model_config.h"

namespace moe::model {

// Parses `specs` into sorted, distinct keys. InvalidArgument naming the bad spec: not of the
// forms above, outside the model's layers or experts, or an explicit layer that is not an MoE
// layer ('*' skips dense layers).
absl::StatusOr<std::vector<ExpertKey>> ParseExpertSpecs(const std::vector<std::string>& specs,
                                                        const ModelConfig& config);

}  // namespace moe::model
