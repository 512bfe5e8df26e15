#include "bench/common/bench_report.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace moe::bench {

MachineInfo DetectMachine() {
  MachineInfo m;
  m.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  m.cpu_model = "unknown";
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) {
        m.cpu_model = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      break;
    }
  }
  return m;
}

std::string IsoTimeNow() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      std::istringstream ss(line.substr(6));
      int64_t kb = 0;
      ss >> kb;
      return kb * 1024;
    }
  }
  rusage ru{};
  if (getrusage(RUSAGE_SELF, &ru) == 0) return static_cast<int64_t>(ru.ru_maxrss) * 1024;
  return 0;
}

BenchReport::BenchReport(std::string suite)
    : BenchReport(std::move(suite), IsoTimeNow(), DetectMachine()) {}

BenchReport::BenchReport(std::string suite, std::string started, MachineInfo machine)
    : suite_(std::move(suite)), started_(std::move(started)), machine_(std::move(machine)) {}

void BenchReport::Add(BenchResult result) { results_.push_back(std::move(result)); }

nlohmann::json BenchReport::ToJson() const {
  nlohmann::json j;
  j["suite"] = suite_;
  j["started"] = started_;
  j["machine"] = {{"cpus", machine_.cpus}, {"cpu_model", machine_.cpu_model}};
  j["results"] = nlohmann::json::array();
  for (const BenchResult& r : results_) {
    nlohmann::json e;
    e["name"] = r.name;
    e["value"] = r.value;
    e["unit"] = r.unit;
    e["params"] = r.params.is_null() ? nlohmann::json::object() : r.params;
    if (r.baseline) {
      e["baseline"] = {{"name", r.baseline->name}, {"value", r.baseline->value}};
      if (r.baseline->value != 0) e["ratio"] = r.value / r.baseline->value;
    }
    j["results"].push_back(std::move(e));
  }
  return j;
}

absl::Status BenchReport::Write(const std::string& path) const {
  const std::string text =
      ToJson().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (path.empty() || path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return absl::OkStatus();
  }
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write benchmark results to ", path));
  return absl::OkStatus();
}

}  // namespace moe::bench
