// The binder: fills a described Options struct (schema.h) from defaults, a YAML file and
// `--set key.sub=value` overrides, in that order, and dumps the effective config.
//
// Typical main (STYLE.md: flags -> Options -> Validate):
//
//   ASSIGN_OR_RETURN(config::CommandLine cl, config::ParseCommandLine(argc, argv, kAliases));
//   if (cl.help) { std::cout << config::DescribeKeys<EchoOptions>(); return 0; }
//   ASSIGN_OR_RETURN(EchoOptions opts, config::LoadOptions<EchoOptions>(cl));
//   RETURN_IF_ERROR(opts.Validate());
//
// Every error is kInvalidArgument and names the key and the value:
//   unknown key "grpc.prot" (value 5) in app.yaml:3; keys under "grpc": host, port, drain_timeout
//   grpc.port: "abc" is not a valid int32 (from --set grpc.port=abc)
// Unknown keys are always an error (a typo must not be silently ignored).
#pragma once

#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/config/schema.h"

namespace moe::common::config {

// A short flag that means `--set key=<value>`, e.g. {"grpc_port", "grpc.port"}.
struct FlagAlias {
  std::string flag;  // Without dashes.
  std::string key;
};

struct CommandLine {
  std::string config_file;             // --config FILE; empty: none.
  std::vector<std::string> overrides;  // "key=value", in command-line order (aliases included).
  bool help = false;                   // --help: print DescribeKeys and exit.
  bool print_config = false;           // --print_config: print the effective config and exit.
};

// Parses `--config FILE`, `--set key=value` (repeatable), `--help`, `--print_config` and the
// aliases, each as `--flag value` or `--flag=value`. argv[0] is skipped. Anything else (an unknown
// flag, a positional argument, a missing value) is kInvalidArgument naming it.
absl::StatusOr<CommandLine> ParseCommandLine(int argc, const char* const* argv,
                                             std::span<const FlagAlias> aliases = {});

namespace internal {
absl::Status ApplyYaml(const SchemaBase& schema, void* obj, absl::string_view yaml_text,
                       absl::string_view source);
absl::Status ApplyYamlFile(const SchemaBase& schema, void* obj, const std::string& path);
absl::Status ApplyOverride(const SchemaBase& schema, void* obj, absl::string_view assignment);
std::string DumpYaml(const SchemaBase& schema, const void* obj);
std::string DescribeKeys(const SchemaBase& schema, const void* defaults);
}  // namespace internal

// Applies a YAML mapping to `opts` (keys absent from it keep their value). `source` names the
// text in errors (a file name). An empty document is a no-op.
template <Describable O>
absl::Status ApplyYaml(absl::string_view yaml_text, absl::string_view source, O& opts) {
  return internal::ApplyYaml(SchemaOf<O>(), &opts, yaml_text, source);
}

// Reads and applies a YAML file. kNotFound when it cannot be read.
template <Describable O>
absl::Status ApplyYamlFile(const std::string& path, O& opts) {
  return internal::ApplyYamlFile(SchemaOf<O>(), &opts, path);
}

// Applies one "key.sub=value" assignment. Lists take comma-separated items.
template <Describable O>
absl::Status ApplyOverride(absl::string_view assignment, O& opts) {
  return internal::ApplyOverride(SchemaOf<O>(), &opts, assignment);
}

// Defaults (`base`), then cl.config_file, then cl.overrides in order. Does not call Validate().
template <Describable O>
absl::StatusOr<O> LoadOptions(const CommandLine& cl, O base = O{}) {
  if (!cl.config_file.empty()) {
    if (absl::Status s = ApplyYamlFile(cl.config_file, base); !s.ok()) return s;
  }
  for (const std::string& assignment : cl.overrides) {
    if (absl::Status s = ApplyOverride(assignment, base); !s.ok()) return s;
  }
  return base;
}

// The effective config as YAML; ApplyYaml of it reproduces `opts`.
template <Describable O>
std::string DumpYaml(const O& opts) {
  return internal::DumpYaml(SchemaOf<O>(), &opts);
}

// One line per key: `grpc.port  int32  default 0  range [0, 65535]  help`, for --help.
template <Describable O>
std::string DescribeKeys(const O& defaults = O{}) {
  return internal::DescribeKeys(SchemaOf<O>(), &defaults);
}

// The common front of a service's main(): parses the command line; answers --help (the keys) and
// --print_config (the effective YAML) on stdout; otherwise loads the options (defaults, file,
// --set overrides) and validates them. Returns nullopt when the process should exit 0 without
// starting (after --help or --print_config); errors name the key and value.
template <Describable O>
absl::StatusOr<std::optional<O>> LoadServiceOptions(int argc, const char* const* argv,
                                                    std::span<const FlagAlias> aliases = {}) {
  absl::StatusOr<CommandLine> cl = ParseCommandLine(argc, argv, aliases);
  if (!cl.ok()) return cl.status();
  if (cl->help) {
    std::fputs(DescribeKeys<O>().c_str(), stdout);
    return std::nullopt;
  }
  absl::StatusOr<O> options = LoadOptions<O>(*cl);
  if (!options.ok()) return options.status();
  if (cl->print_config) {
    std::fputs(DumpYaml(*options).c_str(), stdout);
    return std::nullopt;
  }
  if (absl::Status s = options->Validate(); !s.ok()) return s;
  return std::optional<O>(*std::move(options));
}

}  // namespace moe::common::config
