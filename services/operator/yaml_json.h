// YAML documents -> JSON, with Kubernetes' (YAML 1.2 core schema) scalar typing: a quoted
// scalar is a string; a plain one is null, a bool, an integer or a float when it reads as one,
// else a string. For the chart's rendered manifests and values files.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::op {

// Every non-empty document of `text`, in order. INVALID_ARGUMENT with the parser's message.
absl::StatusOr<std::vector<nlohmann::json>> ParseYamlDocuments(const std::string& text);

}  // namespace moe::op
