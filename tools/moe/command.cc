#include "tools/moe/command.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace moe::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::vector<std::string>& switches) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.rfind("--", 0) != 0 || a == "--") {
      args.positional_.push_back(a);
      continue;
    }
    std::string body = a.substr(2);
    auto eq = body.find('=');
    if (eq != std::string::npos) {
      args.flags_.emplace(body.substr(0, eq), body.substr(eq + 1));
    } else if (std::find(switches.begin(), switches.end(), body) != switches.end()) {
      args.flags_.emplace(body, "true");
    } else if (i + 1 < argv.size()) {
      args.flags_.emplace(body, argv[++i]);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("flag --", body, " needs a value"));
    }
  }
  return args;
}

std::optional<std::string> Args::Get(const std::string& name) const {
  auto it = flags_.find(name);
  if (it == flags_.end()) return std::nullopt;
  return it->second;
}

std::string Args::GetOr(const std::string& name, const std::string& def) const {
  auto v = Get(name);
  return v ? *v : def;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name, int64_t def) const {
  auto v = Get(name);
  if (!v) return def;
  int64_t out;
  if (!absl::SimpleAtoi(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *v, "' is not an integer"));
  }
  return out;
}

absl::StatusOr<double> Args::GetDouble(const std::string& name, double def) const {
  auto v = Get(name);
  if (!v) return def;
  double out;
  if (!absl::SimpleAtod(*v, &out)) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": '", *v, "' is not a number"));
  }
  return out;
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  std::vector<std::string> out;
  auto [lo, hi] = flags_.equal_range(name);
  for (auto it = lo; it != hi; ++it) out.push_back(it->second);
  return out;
}

absl::Status Args::CheckKnown(const std::vector<std::string>& known) const {
  for (const auto& [name, value] : flags_) {
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
  }
  return absl::OkStatus();
}

std::map<std::string, Command>& Commands() {
  static std::map<std::string, Command> commands;
  return commands;
}

bool RegisterCommand(Command command) {
  std::string name = command.name;
  return Commands().emplace(std::move(name), std::move(command)).second;
}

}  // namespace moe::cli
