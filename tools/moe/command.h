// Subcommands of the `moe` CLI. Each cmd_<name>.cc defines one and registers it:
//
//   int RunMakeModel(const moe::cli::Args& args);
//   MOE_REGISTER_COMMAND("make-model", "writes a deterministic random HF checkpoint",
//   RunMakeModel);
//
// Commands print machine-readable output on stdout and progress/errors on stderr, and return the
// process exit code (0 ok, 2 usage error, 1 failure).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace moe::cli {

// Parsed `--flag value`, `--flag=value` and bare `--switch` arguments plus positionals.
class Args {
 public:
  // `switches` names flags that take no value (e.g. "json", "chat").
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::vector<std::string>& switches = {});

  bool Has(const std::string& name) const { return flags_.count(name) > 0; }
  std::optional<std::string> Get(const std::string& name) const;
  std::string GetOr(const std::string& name, const std::string& def) const;
  // Typed getters: errors name the flag and the offending value.
  absl::StatusOr<int64_t> GetInt(const std::string& name, int64_t def) const;
  absl::StatusOr<double> GetDouble(const std::string& name, double def) const;
  // All values of a repeated flag (`--set a=1 --set b=2`).
  std::vector<std::string> GetAll(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  // Flags not in `known`: returns InvalidArgument naming the first one.
  absl::Status CheckKnown(const std::vector<std::string>& known) const;

 private:
  std::multimap<std::string, std::string> flags_;
  std::vector<std::string> positional_;
};

using CommandFn = std::function<int(const Args& args, const std::vector<std::string>& argv)>;

struct Command {
  std::string name;
  std::string summary;
  CommandFn run;
};

// The registry of subcommands (filled by static registration before main).
std::map<std::string, Command>& Commands();
bool RegisterCommand(Command command);

}  // namespace moe::cli

#define MOE_REGISTER_COMMAND(name, summary, fn) \
  static const bool moe_cli_registered_##fn = ::moe::cli::RegisterCommand({name, summary, fn})
