// Whole-file reads for configuration, checkpoints' JSON and test fixtures. Weights are never read
// this way: they are memory-mapped (common/model/safetensors.h).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace moe::common {

// The bytes of the file at `path`, unchanged (binary mode). Errors: NotFound naming the path and
// the reason when it cannot be opened (missing, a directory, no permission); Internal when a read
// fails part way.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace moe::common
