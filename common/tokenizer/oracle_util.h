// Test helper: runs tests/js/tokenizer_oracle.mjs (HF's JS tokenizer) under node and parses its
// JSON output. Used by the oracle tests of real and preset tokenizers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace moe::tokenizer::testing {

// The reason the oracle cannot run here (node not on PATH, tests/js/node_modules missing), or
// nullopt when it can.
std::optional<std::string> OracleUnavailableReason();

// Runs the oracle script with `args` (e.g. {"--tokenizer", "llama3", "--corpus", path}) and returns
// its parsed output.
absl::StatusOr<nlohmann::json> RunOracle(const std::vector<std::string>& args);

// The directory of a bundled real tokenizer (llama2, llama3, qwen3) in tests/js/node_modules.
std::string BundledTokenizerDir(const std::string& name);

std::string SourceDir();

}  // namespace moe::tokenizer::testing
