// The default model of `moe up`: a generated preset checkpoint, made on first use.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace moe::cli {

// Makes the `preset` model ("tiny", "small", "bench") in `dir` unless `dir` has a config.json
// already. Written beside `dir` first and renamed into place, so an interrupted run leaves no
// half model behind. `progress` gets human-readable lines (what is made, then "  weights N%").
// kInvalidArgument: unknown preset; MakeModel's errors; kInternal when it cannot be moved.
absl::Status EnsureModel(const std::string& preset, const std::string& dir,
                         const std::function<void(const std::string&)>& progress);

}  // namespace moe::cli
