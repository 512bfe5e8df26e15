// `moe`: the project's one CLI (DESIGN.md §6). Dispatches to registered subcommands.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/kernels/kernels.h"
#include "tools/moe/command.h"

namespace {

void PrintUsage() {
  std::fprintf(stderr, "usage: moe <command> [flags]\n\ncommands:\n");
  for (const auto& [name, cmd] : moe::cli::Commands()) {
    std::fprintf(stderr, "  %-16s %s\n", name.c_str(), cmd.summary.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "help") {
    PrintUsage();
    return argc < 2 ? 2 : 0;
  }
  auto& commands = moe::cli::Commands();
  auto it = commands.find(argv[1]);
  if (it == commands.end()) {
    std::fprintf(stderr, "moe: unknown command '%s'\n", argv[1]);
    PrintUsage();
    return 2;
  }
  // The kernels' SIMD path for the commands that compute (bitwise identical on every path).
  if (absl::Status s = moe::kernels::SelectIsaFromEnvironment(std::getenv("MOE_KERNELS_ISA"));
      !s.ok()) {
    std::fprintf(stderr, "moe: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::vector<std::string> rest(argv + 2, argv + argc);
  // Commands parse their own flags (they know their switches); hand them the raw argv too.
  auto args = moe::cli::Args::Parse(rest);
  return it->second.run(args.ok() ? *args : moe::cli::Args(), rest);
}
